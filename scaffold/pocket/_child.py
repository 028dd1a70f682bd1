"""The child interpreter of a portable pocket build: build the model, report an error to the parent as a file.

:func:`scaffold.pocket._portable.build_in_child` starts ``python -c CHILD_MAIN OUT CONFIG PROGRESS PARENT``,
which calls :func:`main` here. The child ends itself when its parent dies
(:func:`~scaffold.pocket._portable.end_with_parent`), and an exception it raises is written to
``OUT/.build_error.json`` so that the parent raises it again with its type.

Examples:
    >>> main.__name__
    'main'
"""

from __future__ import annotations

import json
from pathlib import Path

from scaffold.pocket._config import PocketConfig
from scaffold.pocket._portable import ERROR_FILE, end_with_parent
from scaffold.pocket._train import build_pocket_model


def main(out_dir: str, config_json: str, progress: str, parent: str) -> int:
    """Build into ``out_dir`` with the config given as JSON; 0 on success, 1 on bad input (the error is in the
    error file); any other exception is written there too and raised."""
    end_with_parent(int(parent))
    try:
        build_pocket_model(out_dir, PocketConfig.from_dict(json.loads(config_json)), progress=progress == "1")
    except Exception as error:  # the parent raises it again, typed
        (Path(out_dir) / ERROR_FILE).write_text(json.dumps({"type": type(error).__name__, "message": str(error)}))
        if isinstance(error, ValueError):  # bad input: the parent's message says it all
            return 1
        raise
    return 0
