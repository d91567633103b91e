"""The plug-in boundary: what a plug-in's work raises and returns, seen where cselab calls it.

Each kind's contract names its work methods and what each returns (:func:`cselab.registry.contract`, ``work=``); a
plug-in's are wrapped when it is registered (:func:`guard`), whoever wrote it. An exception raised inside one is
tagged with the plug-in (:class:`Failure`: its kind, name, package and version, the method), the innermost plug-in
winning (a loss's logit transform that raises is the transform's failure), and goes on as it was (a user's mistake a
plug-in finds, a :class:`~cselab.errors.CselabError`, is its own one line and is not tagged); what the work was
(``step 3``) and what was kept are added where they are known (:func:`note`), and the command line prints a tagged
exception as one line (``--debug``: its traceback). A value returned that is not what the kind documents is a
:class:`~cselab.errors.PluginError` naming the plug-in, raised where it is returned rather than where it breaks.
:func:`calling` tags what an object that is not registered raises (a training callback).
"""

from __future__ import annotations

import functools
import inspect
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from cselab.errors import CselabError, PluginError
from cselab.files import clipped, shown

#: A return check: (the plug-in, the value returned, the call's positional arguments after self, its keywords) -> what
#: is wrong with the value (completing "expected ..."), or None.
Check = Callable[[Any, Any, tuple, dict], "str | None"]
_TAG = "cselab_failure"
_GUARDED = "__cselab_guarded__"


@dataclass
class Failure:
    """Who raised (``who``: ``"text 'shout' (cselab-shout==0.1)"``), in which method, and, once known, during what
    (``during``: ``"step 3"``) and what was kept (``kept``)."""

    who: str
    method: str
    error: BaseException
    during: str | None = None
    kept: str | None = None

    def line(self, kept: str | None = None) -> str:
        """The failure as one line: who, what it raised, during what, and what was kept (``kept`` where the failure
        does not say)."""
        err = self.error
        said = str(err) if isinstance(err, PluginError) else \
            f"{self.who}: {self.method}() raised {type(err).__name__}: {clipped(err, 200)}"
        during = f" (during {self.during})" if self.during else ""
        kept = self.kept or kept
        return f"{said}{during}{f'; {kept}' if kept else ''} (--debug shows the traceback)"


def failure_of(err: BaseException) -> Failure | None:
    """The plug-in failure ``err`` is, or was raised from (its ``__cause__`` chain); None for any other error."""
    seen: BaseException | None = err
    while seen is not None:
        failure = getattr(seen, _TAG, None)
        if isinstance(failure, Failure):
            return failure
        seen = seen.__cause__
    return None


def note(err: BaseException, during: str | None = None, kept: str | None = None) -> None:
    """Say what a plug-in failure happened during and what was kept, where the first to know does (an inner call's
    words stay)."""
    failure = failure_of(err)
    if failure is not None:
        failure.during = failure.during or during
        failure.kept = failure.kept or kept


def _tag(err: BaseException, who: Callable[[], str], method: str) -> None:
    """Tag ``err`` as the failure of the plug-in ``who()`` names (asked only here), unless an inner plug-in's tag is
    there, or it is a user's mistake that a plug-in found (a :class:`~cselab.errors.CselabError`: its own one line
    already, left as it is)."""
    if isinstance(err, CselabError) and not isinstance(err, PluginError):
        return
    if failure_of(err) is None:
        try:
            setattr(err, _TAG, Failure(who(), method, err))
        except AttributeError:  # an exception type without attributes of its own: raised untagged
            pass


def guard(cls: type, work: Mapping[str, Check | None], who: Callable[[Any], str]) -> None:
    """Wrap ``cls``'s ``work`` methods (name -> return check, None for none): an exception is tagged with ``who(self)``
    (:class:`Failure`), a value its check finds wrong is a :class:`~cselab.errors.PluginError`. A method wrapped
    already (inherited from a guarded class) is left as it is: the plug-in is named from ``self`` either way; so is
    anything but a plain function (a class method, a property)."""
    for name, check in work.items():
        method = inspect.getattr_static(cls, name, None)
        if not inspect.isfunction(method) or getattr(method, _GUARDED, False):
            continue
        setattr(cls, name, _guarded(method, name, check, who))


_ACTIVE = threading.local()  # the (object, method) calls under way in this thread


def _guarded(method: Callable, name: str, check: Check | None, who: Callable[[Any], str]) -> Callable:
    @functools.wraps(method)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        active = _ACTIVE.__dict__.setdefault("calls", set())
        inner, key = (id(self), name) in active, (id(self), name)  # a subclass's super() call: checked once, outside
        active.add(key)
        try:
            result = method(self, *args, **kwargs)
        except Exception as err:
            _tag(err, lambda: who(self), name)
            raise
        finally:
            if not inner:
                active.discard(key)
        problem = check(self, result, args, kwargs) if check is not None and not inner else None
        if problem is not None:
            said = who(self)
            error = PluginError(f"{said}: {name}() returned {_what(result)}; expected {problem}")
            _tag(error, lambda: said, name)
            raise error
        return result
    setattr(call, _GUARDED, True)
    return call


@contextmanager
def calling(obj: Any, method: str, kind: str) -> Iterator[None]:
    """Tag what ``obj.method`` raises in the block with ``obj``'s class and package, for an object of ``kind`` that
    is no registered plug-in (a training callback)."""
    try:
        yield
    except Exception as err:
        _tag(err, lambda: f"{kind} {type(obj).__qualname__} ({package_of(type(obj).__module__)})", method)
        raise


@functools.cache
def package_of(module: str) -> str:
    """The installed distribution (``name==version``) that holds ``module``, or where it comes from when none does
    (a script's module, a checkout not installed); read once a process per module (a package installed by an entry
    point while cselab runs is named by :func:`cselab.registry.origin` instead)."""
    top = module.split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return f"{dist}=={metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return f"module {module}, not from an installed package"


def _what(value: Any) -> str:
    if _is_tensor(value):
        return f"a {value.dtype} tensor of shape {tuple(value.shape)}"
    return f"{type(value).__name__} {shown(value, 60)}"


def _is_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "shape") and hasattr(value, "dtype")


# The checks the contracts name.

def text(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    """One string for the one text given."""
    return None if isinstance(result, str) else "one string (the text changed) for the one text it was given"


def nothing(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    """None (the method works in place)."""
    return None if result is None else "None (it changes the tensors in place)"


def instance(*types: type, what: str) -> Check:
    """A value of one of ``types`` (``what``: how the error says it)."""
    def check(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
        return None if isinstance(result, types) else what
    return check


def tensor(shape_of: int | None = None, rows_of: int | None = None, optional: bool = False) -> Check:
    """A floating-point tensor, of the shape of positional argument ``shape_of`` or with as many rows as ``rows_of``
    has (None too where ``optional``)."""
    def check(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
        wanted = "a floating-point tensor" + (" or None" if optional else "")
        if result is None and optional:
            return None
        if not _is_tensor(result) or not result.dtype.is_floating_point:
            return wanted
        like: Any = args[shape_of] if shape_of is not None and len(args) > shape_of else None
        if _is_tensor(like) and result.shape != like.shape:
            return f"{wanted} of its input's shape {tuple(like.shape)}"
        rows: Any = args[rows_of] if rows_of is not None and len(args) > rows_of else None
        if _is_tensor(rows) and rows.dim() > 1 and (result.dim() == 0 or len(result) != len(rows)):
            return f"{wanted} of one row per input row ({len(rows)})"
        return None
    return check


def id_pair(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    """Token ids and an attention mask: two integer tensors of one shape, a row per input row."""
    given: Any = args[0] if args else kwargs.get("input_ids")
    rows = len(given) if _is_tensor(given) else None
    wanted = f"(input_ids, attention_mask): two integer tensors of one shape with {rows} rows"
    if not (isinstance(result, tuple) and len(result) == 2 and all(_is_tensor(t) for t in result)):
        return wanted
    ids, mask = result
    if ids.dim() != 2 or ids.shape != mask.shape or len(ids) != rows or ids.dtype.is_floating_point:
        return wanted
    return None


def candidates(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    """A list of candidate strings per text given."""
    texts: Sequence[Any] = args[0] if args else kwargs.get("texts", ())
    wanted = f"a list of {len(texts)} lists of strings (the candidates of each text given)"
    if not isinstance(result, list) or len(result) != len(texts):
        return wanted
    if not all(isinstance(found, list) and all(isinstance(c, str) for c in found) for found in result):
        return wanted
    return None


def loss_value(plugin: Any, result: Any, args: tuple, kwargs: dict) -> str | None:
    """A loss's value: one per row (a 1-D tensor) for a loss reduced over ``rows``, else one number."""
    if not _is_tensor(result) or not result.dtype.is_floating_point:
        return "a floating-point tensor"
    if getattr(plugin, "reduce", "rows") == "rows":
        return None if result.dim() == 1 else "a 1-D tensor of one loss per row (its reduce is 'rows')"
    return None if result.numel() == 1 else f"one number (its reduce is {plugin.reduce!r})"
