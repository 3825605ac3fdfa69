"""numba's cached machine code of this package, dropped when any of the package's sources changed.

Why: numba keys a cached function on its own file alone, yet compiled functions here call others
in other files (the layers' pass calls the vector kernel, the draft head's call the layers' pass):
after an edit or an upgrade that changed only the kernel's file, the pass's cached code kept the old
kernel, and where the old kernel started threads the process crashed (``NRT_adapt_ndarray_to_python:
'descr' is NULL``). So the cached files beside these modules are stamped with a digest of every
source of the package and dropped, all of them, whenever it differs; the next call compiles again.
"""
import hashlib
import logging
from pathlib import Path

logger = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parent
STAMP = "numba_sources.sha256"


def sources_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def drop_stale_compiled_code(root: Path = PACKAGE):
    """Delete the numba cache files under ``root``'s ``__pycache__`` folders unless they were made
    from the sources ``root`` holds now."""
    stamp = root / "__pycache__" / STAMP
    current = sources_digest(root)
    try:
        if stamp.exists() and stamp.read_text() == current:
            return
        for cached in list(root.rglob("__pycache__/*.nbi")) + list(root.rglob("__pycache__/*.nbc")):
            cached.unlink(missing_ok=True)
        stamp.parent.mkdir(exist_ok=True)
        stamp.write_text(current)
    except OSError as error:  # a read-only install: numba then caches in its own folder
        logger.debug(f"numba's cache beside {root} left as it is: {error}")
