"""Model backends: the protocol and the binding of a backend to a graph's model alias."""

from scaffold.backends.base import Backend, Capabilities, Model, resolve_model

__all__ = ["Backend", "Capabilities", "Model", "resolve_model"]
