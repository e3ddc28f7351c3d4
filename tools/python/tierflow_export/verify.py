"""Checking a written export: through the tierflow module's workload reader
(tierflow.load_workload, the reader and verifier `tierflow trace import` uses) where
`import tierflow` works, else with the Python rules of rules.py. Which one checked is said
only on request (--verbose), never in the document."""

from .errors import InternalError, one_line
from .rules import check_workload


def tierflow_reader():
    """(tierflow.load_workload, description) where the tierflow module imports, else
    (None, why not)."""
    try:
        import tierflow
    except ImportError as e:
        return None, (f"import tierflow failed: {one_line(e)}; the built module is put on the "
                      "path with PYTHONPATH=build/release/python")
    reader = getattr(tierflow, "load_workload", None)
    if reader is None:
        return None, f"{tierflow.__file__} has no load_workload"
    version = getattr(tierflow, "__version__", "?")
    return reader, f"tierflow {version} at {tierflow.__file__}"


def verify_file(path, doc):
    """Checks the workload document written at path (doc: the same document as data);
    InternalError if it breaks the format rules. Returns one line saying how it was
    checked."""
    reader, about = tierflow_reader()
    if reader is None:
        problems = check_workload(doc)
        if problems:
            raise InternalError("the workload breaks the format rules: " +
                                "; ".join(problems[:3]))
        return f"checked with the exporter's own format rules ({about})"
    try:
        reader(path)
    except (ValueError, RuntimeError) as e:  # tierflow.InputError is a ValueError
        message = getattr(e, "message", None) or str(e)
        where = f"{e.line}:{e.col}: " if getattr(e, "line", None) else ""
        raise InternalError("the workload breaks the format rules (tierflow.load_workload): "
                            f"{where}{one_line(message)}") from None
    return f"checked with tierflow.load_workload ({about})"
