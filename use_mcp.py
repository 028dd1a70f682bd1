import sys
import scaffold as sf
from scaffold.testing import ScriptedBackend
from scaffold.tools import MCPServer

tools = MCPServer([sys.executable, "examples/mcp_server.py"]).tools()
print([t.name for t in tools])

def model(request):
    results = [m[1] for m in request.messages if m[0] == "tool"]
    if results:
        return f"A marathon is {results[0]} miles."
    arguments = '{"value": 42.195, "from_unit": "km", "to_unit": "mile"}'
    return sf.Completion(text="", tool_calls=(sf.ToolCall("c1", "convert_length", arguments),))

@sf.graph
def convert(problem):
    return sf.agent("{problem}", model="m", tools=tools)

print(convert.run_sync({"problem": "How long is a marathon in miles?"}, models={"m": ScriptedBackend(model)},
                       store=None).output.text)
