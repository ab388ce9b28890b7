"""ONNX graphs traced from JAX functions, so a network is described once (in flax) for both.

`function_to_onnx` traces a function with `jax.make_jaxpr`, named dimensions (e.g. "batch") kept
symbolic, and writes each primitive of the jaxpr as ONNX operators; calls (`jit`, `custom_jvp_call`,
...) are inlined. Closed-over arrays become initialisers, and a primitive whose inputs are all
constants is evaluated here by JAX itself (weight transposes, the normaliser's std), so the graph
holds only the computation on its inputs, with JAX's numbers for everything else. A primitive
without a translation raises `ExportError` naming it.
"""

from __future__ import annotations

import dataclasses
import itertools
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import numpy as np
from jax.extend.core import ClosedJaxpr, InconclusiveDimensionOperation, Jaxpr, JaxprEqn, Literal

from strl_jax.errors import ExportError

Value = str | np.ndarray  # an ONNX tensor name, or a constant not yet written into the graph
Dim = Any  # int, or a symbolic dimension of `jax.export`
# Primitives that call an inner jaxpr: translated by inlining it.
CALLS = (
    "jit",
    "pjit",
    "closed_call",
    "core_call",
    "custom_jvp_call",
    "custom_vjp_call",
    "remat",
    "checkpoint",
)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A graph input: a `str` in `shape` is a symbolic dimension, the same name the same size."""

    name: str
    shape: tuple[int | str, ...]
    dtype: Any = np.float32


def _import_onnx():
    """The `onnx` package, an optional dependency (`strl_jax[export]`)."""
    try:
        import onnx
    except ImportError as err:
        raise ImportError("ONNX export needs onnx: pip install 'strl_jax[export]'", name="onnx") from err
    return onnx


def _same(a: Dim, b: Dim) -> bool:
    try:
        return bool(a == b)
    except InconclusiveDimensionOperation:
        return False


def _static(shape: Sequence[Dim]) -> bool:
    return not any(jax.export.is_symbolic_dim(d) for d in shape)


def _ints(values: Sequence[Dim], what: str) -> list[int]:
    if not _static(values):
        raise ExportError(
            f"{what} {tuple(map(str, values))} depends on a symbolic dimension; no ONNX form here"
        )
    return [int(v) for v in values]


def _called_jaxpr(eqn: JaxprEqn) -> tuple[Jaxpr, Sequence] | None:
    """`(jaxpr, consts)` a call primitive runs, None for other primitives."""
    if eqn.primitive.name not in CALLS:
        return None
    for key in ("jaxpr", "call_jaxpr", "fun_jaxpr"):
        inner = eqn.params.get(key)
        if isinstance(inner, ClosedJaxpr):
            return inner.jaxpr, inner.consts
        if isinstance(inner, Jaxpr):
            return inner, ()
    return None


class Graph:
    """ONNX nodes and initialisers under construction, and where each symbolic size can be read."""

    def __init__(self, onnx: Any) -> None:
        self.onnx = onnx
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._count = itertools.count()
        self._consts: dict[tuple, str] = {}
        self._dim_sources: dict[Dim, tuple[str, int]] = {}  # symbolic size -> (tensor, axis) that has it
        self._dims: dict[Dim, str] = {}

    def fresh(self, base: str) -> str:
        return f"{base}_{next(self._count)}"

    def const(self, value: Any, dtype: Any = None) -> str:
        """An initialiser holding `value` (one per distinct value)."""
        array = np.asarray(value, dtype)
        key = (array.dtype.str, array.shape, array.tobytes())
        if key not in self._consts:
            name = self.fresh("const")
            self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
            self._consts[key] = name
        return self._consts[key]

    def tensor(self, value: Value) -> str:
        return value if isinstance(value, str) else self.const(value)

    def ops(self, op_type: str, inputs: Sequence[Value], outputs: int, **attrs: Any) -> list[str]:
        names = [self.fresh(op_type.lower()) for _ in range(outputs)]
        inputs = [self.tensor(x) for x in inputs]
        self.nodes.append(self.onnx.helper.make_node(op_type, inputs, names, name=names[0], **attrs))
        return names

    def op(self, op_type: str, *inputs: Value, **attrs: Any) -> str:
        return self.ops(op_type, inputs, 1, **attrs)[0]

    def ints(self, values: Sequence[int]) -> str:
        return self.const(values, np.int64)

    # ---- symbolic sizes
    def note_shape(self, name: str, shape: Sequence[Dim]) -> None:
        """Remember that tensor `name` carries the symbolic sizes of `shape` (read when needed)."""
        for axis, d in enumerate(shape):
            if jax.export.is_symbolic_dim(d):
                self._dim_sources.setdefault(d, (name, axis))

    def dim(self, d: Dim) -> str | None:
        """A 1-element int64 tensor holding size `d` at run time; None if no tensor has it."""
        if not jax.export.is_symbolic_dim(d):
            return self.ints([int(d)])
        if d not in self._dims:
            if d not in self._dim_sources:
                return None
            name, axis = self._dim_sources[d]
            self._dims[d] = self.op("Shape", name, start=axis, end=axis + 1)
        return self._dims[d]

    def shape(self, dims: Sequence[Dim], infer_one: bool = False) -> str:
        """An int64 shape tensor; with `infer_one`, one size no tensor has becomes -1 (Reshape)."""
        if _static(dims):
            return self.ints([int(d) for d in dims])
        parts = [self.dim(d) for d in dims]
        unknown = [str(d) for d, p in zip(dims, parts, strict=True) if p is None]
        if len(unknown) > int(infer_one):
            raise ExportError(f"no ONNX form here for a shape with the symbolic size(s) {unknown}")
        return self.op("Concat", *[self.ints([-1]) if p is None else p for p in parts], axis=0)

    # ---- translation
    def run(self, jaxpr: Jaxpr, consts: Sequence[Any], args: Sequence[Value]) -> list[Value]:
        """Translate `jaxpr` applied to `args`; returns its outputs (names or folded constants)."""
        env: dict[Any, Value] = {}
        env.update((v, np.asarray(c)) for v, c in zip(jaxpr.constvars, consts, strict=True))
        env.update(zip(jaxpr.invars, args, strict=True))

        def read(atom: Any) -> Value:
            return np.asarray(atom.val, atom.aval.dtype) if isinstance(atom, Literal) else env[atom]

        for eqn in jaxpr.eqns:
            outs = self.equation(eqn, [read(a) for a in eqn.invars])
            for var, out in zip(eqn.outvars, outs, strict=True):
                env[var] = out
                if isinstance(out, str):
                    self.note_shape(out, var.aval.shape)
        return [read(a) for a in jaxpr.outvars]

    def equation(self, eqn: JaxprEqn, inputs: list[Value]) -> list[Value]:
        called = _called_jaxpr(eqn)
        if called is not None:
            return self.run(*called, inputs)
        constant = all(isinstance(x, np.ndarray) for x in inputs)
        if constant and all(_static(v.aval.shape) for v in eqn.outvars):
            outs = eqn.primitive.bind(*inputs, **eqn.params)
            return [np.asarray(o) for o in (outs if eqn.primitive.multiple_results else [outs])]
        rule = RULES.get(eqn.primitive.name)
        if rule is None:
            raise ExportError(
                f"the JAX primitive {eqn.primitive.name!r} has no ONNX translation "
                "(strl_jax.onnx_graph.RULES lists those that have one)"
            )
        out = rule(self, eqn, *inputs)
        return out if isinstance(out, list) else [out]

    def pruned(self, outputs: Sequence[str]) -> tuple[list[Any], list[Any]]:
        """The nodes and initialisers the outputs depend on (jaxprs keep unused results, e.g. the std)."""
        needed, kept = set(outputs), []
        for node in reversed(self.nodes):
            if needed.intersection(node.output):
                kept.append(node)
                needed.update(node.input)
        return kept[::-1], [t for t in self.initializers if t.name in needed]


Rule = Callable[..., Value | list[Value]]


def _dtype(eqn: JaxprEqn, i: int = 0) -> np.dtype:
    return np.dtype(eqn.invars[i].aval.dtype)


def _in_shape(eqn: JaxprEqn, i: int = 0) -> tuple[Dim, ...]:
    return tuple(eqn.invars[i].aval.shape)


def _out_shape(eqn: JaxprEqn) -> tuple[Dim, ...]:
    return tuple(eqn.outvars[0].aval.shape)


def _onnx_type(g: Graph, dtype: Any) -> int:
    return g.onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _same_op(op_type: str, **attrs: Any) -> Rule:
    return lambda g, eqn, *xs: g.op(op_type, *xs, **attrs)


def _logical(bool_op: str, int_op: str) -> Rule:
    return lambda g, eqn, *xs: g.op(bool_op if _dtype(eqn) == np.bool_ else int_op, *xs)


def _one(eqn: JaxprEqn) -> np.ndarray:
    return np.ones((), _dtype(eqn))


def _integer_pow(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
    """Square-and-multiply, in JAX's order (its own lowering of `integer_pow`)."""
    y = eqn.params["y"]
    acc, n = None, abs(y)
    while n:
        if n & 1:
            acc = x if acc is None else g.op("Mul", acc, x)
        n >>= 1
        if n:
            x = g.op("Mul", x, x)
    if acc is None:
        return g.op("Expand", _one(eqn), g.op("Shape", x))
    return g.op("Div", _one(eqn), acc) if y < 0 else acc


def _select_n(g: Graph, eqn: JaxprEqn, which: Value, *cases: Value) -> Value:
    if _dtype(eqn) == np.bool_:
        return g.op("Where", which, cases[1], cases[0]) if len(cases) == 2 else cases[0]
    out = cases[0]
    for i, case in enumerate(cases[1:], start=1):
        out = g.op("Where", g.op("Equal", which, np.asarray(i, _dtype(eqn))), case, out)
    return out


def _clamp(g: Graph, eqn: JaxprEqn, lo: Value, x: Value, hi: Value) -> Value:
    if not _in_shape(eqn, 0) and not _in_shape(eqn, 2):
        return g.op("Clip", x, lo, hi)
    return g.op("Min", g.op("Max", x, lo), hi)


def _convert(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
    return g.op("Cast", x, to=_onnx_type(g, eqn.params["new_dtype"]))


def _broadcast_in_dim(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
    shape, dims = eqn.params["shape"], eqn.params["broadcast_dimensions"]
    new_axes = [a for a in range(len(shape)) if a not in dims]
    if new_axes:
        x = g.op("Unsqueeze", x, g.ints(new_axes))
    aligned: list[Dim] = [1] * len(shape)
    for size, axis in zip(_in_shape(eqn), dims, strict=True):
        aligned[axis] = size
    if all(_same(a, s) for a, s in zip(aligned, shape, strict=True)):
        return x
    return g.op("Expand", x, g.shape([1 if _same(a, s) else s for a, s in zip(aligned, shape, strict=True)]))


def _reshape(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
    if eqn.params.get("dimensions") is not None:
        raise ExportError("reshape with a transposition (`dimensions`) has no ONNX form here")
    return g.op("Reshape", x, g.shape(eqn.params["new_sizes"], infer_one=True))


def _stack(g: Graph, eqn: JaxprEqn, *xs: Value) -> Value:
    axis = eqn.params["axis"]
    return g.op("Concat", *[g.op("Unsqueeze", x, g.ints([axis])) for x in xs], axis=axis)


def _split(g: Graph, eqn: JaxprEqn, x: Value) -> list[Value]:
    sizes = _ints(eqn.params["sizes"], "split sizes")
    return list(g.ops("Split", [x, g.ints(sizes)], len(sizes), axis=eqn.params["axis"]))


def _box(g: Graph, x: Value, shape: Sequence[Dim], starts: Sequence[Dim], sizes: Sequence[Dim]) -> Value:
    """The static slice `x[starts : starts + sizes]`, starts clamped into range as JAX does."""
    axes, begin, end = [], [], []
    for axis, (dim, start, size) in enumerate(zip(shape, starts, sizes, strict=True)):
        if _same(dim, size):
            continue  # the whole axis
        dim, start, size = _ints((dim, start, size), "slice bounds")
        start = min(max(start, 0), dim - size)
        axes.append(axis)
        begin.append(start)
        end.append(start + size)
    return g.op("Slice", x, g.ints(begin), g.ints(end), g.ints(axes)) if axes else x


def _slice(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
    starts, limits = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params["strides"] or (1,) * len(starts)
    shape = _in_shape(eqn)
    axes = [
        a
        for a in range(len(shape))
        if not (_same(starts[a], 0) and _same(limits[a], shape[a]) and strides[a] == 1)
    ]
    if not axes:
        return x
    begin, end, steps = (
        g.ints(_ints([values[a] for a in axes], f"slice {what}"))
        for values, what in ((starts, "starts"), (limits, "limits"), (strides, "strides"))
    )
    return g.op("Slice", x, begin, end, g.ints(axes), steps)


def _dynamic_slice(g: Graph, eqn: JaxprEqn, x: Value, *starts: Value) -> Value:
    if not all(isinstance(s, np.ndarray) for s in starts):
        raise ExportError("dynamic_slice with start indices computed from the inputs has no ONNX form here")
    return _box(g, x, _in_shape(eqn), [int(s) for s in starts], eqn.params["slice_sizes"])


def _gather(g: Graph, eqn: JaxprEqn, x: Value, indices: Value) -> Value:
    """Indexing with constant integers (e.g. `hidden[layer]`): a static slice without the indexed axes."""
    dn, sizes = eqn.params["dimension_numbers"], eqn.params["slice_sizes"]
    is_point = isinstance(indices, np.ndarray) and indices.shape == (len(dn.start_index_map),)
    if (
        not is_point
        or dn.operand_batching_dims
        or tuple(dn.offset_dims) != tuple(range(len(_out_shape(eqn))))
    ):
        raise ExportError("gather has an ONNX form here only as indexing with constant integers")
    shape = _in_shape(eqn)
    starts = [0] * len(shape)
    for axis, index in zip(dn.start_index_map, indices, strict=True):
        starts[axis] = int(index)
    out = _box(g, x, shape, starts, sizes)
    return g.op("Squeeze", out, g.ints(list(dn.collapsed_slice_dims))) if dn.collapsed_slice_dims else out


def _dot_general(g: Graph, eqn: JaxprEqn, lhs: Value, rhs: Value) -> Value:
    """MatMul for `x @ w` (w a matrix), Einsum for any other contraction."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if _dtype(eqn) != out_dtype:  # preferred_element_type: compute in the result's type
        lhs, rhs = (g.op("Cast", v, to=_onnx_type(g, out_dtype)) for v in (lhs, rhs))
    l_rank, r_rank = len(_in_shape(eqn, 0)), len(_in_shape(eqn, 1))
    if not lb and tuple(lc) == (l_rank - 1,) and tuple(rc) == (0,) and r_rank == 2:
        return g.op("MatMul", lhs, rhs)
    letters = iter(string.ascii_letters)
    left = [next(letters) for _ in range(l_rank)]
    right = [next(letters) for _ in range(r_rank)]
    for a, b in zip((*lc, *lb), (*rc, *rb), strict=True):
        right[b] = left[a]
    free_l = [left[a] for a in range(l_rank) if a not in (*lc, *lb)]
    free_r = [right[b] for b in range(r_rank) if b not in (*rc, *rb)]
    out = "".join([left[a] for a in lb] + free_l + free_r)
    return g.op("Einsum", lhs, rhs, equation=f"{''.join(left)},{''.join(right)}->{out}")


def _in_layout(g: Graph, x: Value, perm: Sequence[int]) -> Value:
    """`x` with its axes in the order `perm` (folded for constants, none for the identity)."""
    perm = [int(a) for a in perm]
    if perm == sorted(perm):
        return x
    return np.transpose(x, perm) if isinstance(x, np.ndarray) else g.op("Transpose", x, perm=perm)


def _conv(g: Graph, eqn: JaxprEqn, lhs: Value, rhs: Value) -> Value:
    """Conv on ONNX's `[N, C, spatial...]` layout; other dimension numbers become transposes."""
    p = eqn.params
    unsupported = {
        "lhs_dilation (a transposed convolution)": any(d != 1 for d in p["lhs_dilation"]),
        "batch_group_count > 1": p["batch_group_count"] != 1,
        "negative padding (cropping)": any(lo < 0 or hi < 0 for lo, hi in p["padding"]),
    }
    refused = [what for what, found in unsupported.items() if found]
    if refused:
        raise ExportError(f"conv_general_dilated with {', '.join(refused)} has no ONNX form here")
    dn = p["dimension_numbers"]
    out_dtype = np.dtype(eqn.outvars[0].aval.dtype)
    if _dtype(eqn) != out_dtype:  # preferred_element_type: compute in the result's type
        lhs, rhs = (g.op("Cast", v, to=_onnx_type(g, out_dtype)) for v in (lhs, rhs))
    kernel = _ints([_in_shape(eqn, 1)[a] for a in dn.rhs_spec[2:]], "convolution kernel shape")
    y = g.op(
        "Conv",
        _in_layout(g, lhs, dn.lhs_spec),
        _in_layout(g, rhs, dn.rhs_spec),
        kernel_shape=kernel,
        strides=list(p["window_strides"]),
        pads=[lo for lo, _ in p["padding"]] + [hi for _, hi in p["padding"]],
        dilations=list(p["rhs_dilation"]),
        group=p["feature_group_count"],
    )
    return _in_layout(g, y, np.argsort(dn.out_spec))


def _max_pool(negate: bool = False) -> Rule:
    """`reduce_window_max` (`_min`: the max of the negation) as ONNX MaxPool, which pools every
    axis after the first two: those two must have a unit window (e.g. NCHW pooling)."""

    def rule(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
        p = eqn.params
        window, strides, pads = p["window_dimensions"], p["window_strides"], p["padding"]
        pooled = [window[a] != 1 or strides[a] != 1 or tuple(pads[a]) != (0, 0) for a in range(len(window))]
        if len(window) < 3 or any(pooled[:2]):
            raise ExportError(
                f"{eqn.primitive.name} over the first two axes (window {tuple(window)}) has no ONNX form "
                "here; ONNX pools only the axes after [batch, channels]"
            )
        if any(d != 1 for d in p["base_dilation"]):
            raise ExportError(f"{eqn.primitive.name} with base_dilation has no ONNX form here")
        pads = pads[2:]
        attrs = dict(
            kernel_shape=list(window[2:]),
            strides=list(strides[2:]),
            pads=[lo for lo, _ in pads] + [hi for _, hi in pads],
            dilations=list(p["window_dilation"][2:]),
        )
        if negate:
            return g.op("Neg", g.op("MaxPool", g.op("Neg", x), **attrs))
        return g.op("MaxPool", x, **attrs)

    return rule


def _reduce(op_type: str) -> Rule:
    return lambda g, eqn, x: g.op(op_type, x, g.ints(list(eqn.params["axes"])), keepdims=0)


def _arg(op_type: str) -> Rule:
    def rule(g: Graph, eqn: JaxprEqn, x: Value) -> Value:
        (axis,) = eqn.params["axes"]
        index = g.op(op_type, x, axis=axis, keepdims=0)
        return g.op("Cast", index, to=_onnx_type(g, eqn.params["index_dtype"]))

    return rule


RULES: dict[str, Rule] = {
    **{
        name: _same_op(op_type)
        for name, op_type in {
            "neg": "Neg",
            "exp": "Exp",
            "log": "Log",
            "tanh": "Tanh",
            "logistic": "Sigmoid",
            "sqrt": "Sqrt",
            "abs": "Abs",
            "sign": "Sign",
            "floor": "Floor",
            "ceil": "Ceil",
            "erf": "Erf",
            "sin": "Sin",
            "cos": "Cos",
            "copy": "Identity",
            "copy_p": "Identity",
            "add": "Add",
            "add_any": "Add",
            "sub": "Sub",
            "mul": "Mul",
            "div": "Div",
            "max": "Max",
            "min": "Min",
            "pow": "Pow",
            "eq": "Equal",
            "lt": "Less",
            "le": "LessOrEqual",
            "gt": "Greater",
            "ge": "GreaterOrEqual",
        }.items()
    },
    "rem": _same_op("Mod", fmod=1),  # C's fmod, like lax.rem
    "ne": lambda g, eqn, a, b: g.op("Not", g.op("Equal", a, b)),
    "not": _logical("Not", "BitwiseNot"),
    "and": _logical("And", "BitwiseAnd"),
    "or": _logical("Or", "BitwiseOr"),
    "xor": _logical("Xor", "BitwiseXor"),
    "log1p": lambda g, eqn, x: g.op("Log", g.op("Add", x, _one(eqn))),
    "expm1": lambda g, eqn, x: g.op("Sub", g.op("Exp", x), _one(eqn)),
    "erfc": lambda g, eqn, x: g.op("Sub", _one(eqn), g.op("Erf", x)),
    "rsqrt": lambda g, eqn, x: g.op("Div", _one(eqn), g.op("Sqrt", x)),
    "square": lambda g, eqn, x: g.op("Mul", x, x),
    "stop_gradient": lambda g, eqn, x: x,  # no gradients at inference
    "integer_pow": _integer_pow,
    "select_n": _select_n,
    "clamp": _clamp,
    "convert_element_type": _convert,
    "broadcast_in_dim": _broadcast_in_dim,
    "reshape": _reshape,
    "squeeze": lambda g, eqn, x: g.op("Squeeze", x, g.ints(list(eqn.params["dimensions"]))),
    "transpose": lambda g, eqn, x: g.op("Transpose", x, perm=list(eqn.params["permutation"])),
    "concatenate": lambda g, eqn, *xs: g.op("Concat", *xs, axis=eqn.params["dimension"]),
    "stack": _stack,
    "split": _split,
    "slice": _slice,
    "dynamic_slice": _dynamic_slice,
    "gather": _gather,
    "dot_general": _dot_general,
    "conv_general_dilated": _conv,
    "reduce_window_max": _max_pool(),
    "reduce_window_min": _max_pool(negate=True),
    "reduce_sum": _reduce("ReduceSum"),
    "reduce_max": _reduce("ReduceMax"),
    "reduce_min": _reduce("ReduceMin"),
    "reduce_prod": _reduce("ReduceProd"),
    "argmax": _arg("ArgMax"),
    "argmin": _arg("ArgMin"),
}


def _value_info(onnx: Any, name: str, shape: Sequence[Any], dtype: Any) -> Any:
    dims = [d if isinstance(d, int) else str(d) for d in shape]
    return onnx.helper.make_tensor_value_info(
        name, onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), dims
    )


def function_to_onnx(
    fn: Callable[..., Sequence[jax.Array]],
    inputs: Sequence[TensorSpec],
    outputs: Sequence[str],
    *,
    opset: int,
    ir_version: int,
    graph_name: str,
    doc_string: str = "",
    metadata: Mapping[str, str] | None = None,
) -> Any:
    """`fn(*inputs) -> tuple of arrays` as a checked ONNX `ModelProto` with the given tensor names;
    `metadata` becomes its `metadata_props` (what a runtime reads about the model)."""
    onnx = _import_onnx()
    scope = jax.export.SymbolicScope()
    symbols = sorted({d for spec in inputs for d in spec.shape if isinstance(d, str)})
    sizes = {s: jax.export.symbolic_shape(s, scope=scope)[0] for s in symbols}
    avals = [jax.ShapeDtypeStruct(tuple(sizes.get(d, d) for d in spec.shape), spec.dtype) for spec in inputs]
    try:
        closed = jax.make_jaxpr(fn)(*avals)
    except InconclusiveDimensionOperation as err:
        raise ExportError(f"the function cannot be traced with symbolic sizes {symbols}: {err}") from None
    g = Graph(onnx)
    for spec, aval in zip(inputs, avals, strict=True):
        g.note_shape(spec.name, aval.shape)
    results = g.run(closed.jaxpr, closed.consts, [spec.name for spec in inputs])
    for name, value in zip(outputs, results, strict=True):
        g.nodes.append(onnx.helper.make_node("Identity", [g.tensor(value)], [name], name=name))
    nodes, initializers = g.pruned(outputs)
    graph = onnx.helper.make_graph(
        nodes,
        graph_name,
        [_value_info(onnx, s.name, s.shape, s.dtype) for s in inputs],
        [_value_info(onnx, n, a.shape, a.dtype) for n, a in zip(outputs, closed.out_avals, strict=True)],
        initializers,
    )
    model = onnx.helper.make_model(
        graph,
        opset_imports=[onnx.helper.make_opsetid("", opset)],
        producer_name="strl_jax",
        doc_string=doc_string,
    )
    model.ir_version = ir_version
    if metadata:
        onnx.helper.set_model_props(model, dict(metadata))
    onnx.checker.check_model(model)
    return model
