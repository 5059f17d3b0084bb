"""Work measured by lines executed, not by the clock: a bound a loaded machine keeps."""
import sys


class StillLooping(Exception):
    """Raised once ``lines_run`` passes its ``limit``."""


def lines_run(call, in_file, limit=None) -> int:
    """Run ``call`` and return how many lines the code of the files for which ``in_file(filename)`` is true executed
    in it; :class:`StillLooping` once they pass ``limit`` (when given)."""
    count = 0

    def local(frame, event, arg):
        nonlocal count
        if event == "line":
            count += 1
            if limit is not None and count > limit:
                raise StillLooping(count)
        return local

    def tracer(frame, event, arg):
        return local if in_file(frame.f_code.co_filename) else None

    sys.settrace(tracer)
    try:
        call()
    finally:
        sys.settrace(None)
    return count
