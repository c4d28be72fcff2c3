"""What the exporter's tests share (make_export.py, make_traced.py): an export that must be
refused, and the words its error must hold."""
import stformer_export as sx


def refused(folder, model, example, *wanted, name="bad", **kw):
    """sx.export(model, example, name, folder, **kw) raises ExportError holding every one of wanted;
    returns its message."""
    try:
        sx.export(model, example, name, folder, **kw)
    except sx.ExportError as e:
        for w in wanted:
            assert w in str(e), f"{w!r} not in:\n{e}"
        return str(e)
    raise AssertionError(f"exported: {type(model).__name__}")
