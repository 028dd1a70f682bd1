"""Made once with scaffold at 8ed10db (schema of the release before tool calls): tests/data/store_before_tools.db."""
import scaffold as sf
from scaffold.testing import ScriptedBackend


@sf.graph
def solve_and_merge(problem):
    drafts = sf.sample("Solve: {problem}", model="solver", n=3)
    return sf.aggregate(drafts, model="judge", prompt="Merge for {problem}:\n{candidates}")

def solver(request):
    return r"draft \boxed{4}"

def judge(request):
    raise sf.BackendError("judge unavailable")


def main() -> None:
    """Write the store. Only when run as a script: pytest imports this file while collecting doctests, and an
    import must not rewrite (and so migrate) the committed old-schema store the migration test reads."""
    store = sf.Store("tests/data/store_before_tools.db")
    models = {"solver": ScriptedBackend(solver), "judge": ScriptedBackend(judge)}
    result = solve_and_merge.run_sync({"problem": "2+2"}, models=models, seed=7, run_id="before-tools", store=store,
                                      raise_on_error=False)
    print(result.error)
    store.close()


if __name__ == "__main__":
    main()
