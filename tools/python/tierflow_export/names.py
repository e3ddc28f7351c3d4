"""What the recorder recognises by name: activation and norm modules, and the functions,
methods and operators of torch, torch.nn.functional, Tensor and operator grouped by how
they are costed; module paths to transformer block indices."""

import re

ACTIVATION_MODULES = {
    "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh", "ReLU": "relu",
    "ReLU6": "relu", "Softplus": "softplus", "Mish": "mish", "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid", "ELU": "elu", "SELU": "selu", "LeakyReLU": "leaky_relu",
    "Softmax": "softmax", "LogSoftmax": "log_softmax", "GELUActivation": "gelu",
    "SiLUActivation": "silu", "NewGELUActivation": "gelu", "FastGELUActivation": "gelu",
    "QuickGELUActivation": "gelu", "PytorchGELUTanh": "gelu",
}
NORM_MODULE_SUFFIXES = ("LayerNorm", "RMSNorm", "GroupNorm", "BatchNorm1d", "BatchNorm2d",
                        "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d", "LocalResponseNorm")

# Functions and methods, by name (torch.*, torch.nn.functional.*, Tensor methods, operator.*).
VIEW_NAMES = {
    "view", "view_as", "reshape", "reshape_as", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "expand", "expand_as", "flatten", "unflatten", "narrow", "select", "split",
    "split_with_sizes", "chunk", "unbind", "movedim", "moveaxis", "swapaxes", "swapdims",
    "detach", "as_strided", "diagonal", "unfold",
}
MATMUL_NAMES = {"matmul", "bmm", "mm", "baddbmm", "addmm", "addbmm", "einsum", "mv", "dot"}
REDUCTION_NAMES = {"sum", "mean", "var", "std", "amax", "amin", "logsumexp", "norm", "prod",
                   "var_mean", "std_mean", "cumsum", "cumprod", "max", "min"}
SELECT_NAMES = {"topk", "sort", "argsort", "argmax", "argmin", "kthvalue", "median", "mode"}
COPY_NAMES = {
    "cat", "concat", "stack", "hstack", "vstack", "clone", "contiguous", "to", "float", "half",
    "bfloat16", "double", "type", "type_as", "gather", "index_select", "getitem", "repeat",
    "repeat_interleave", "masked_select", "flip", "roll", "tril", "triu", "one_hot", "pad",
    "take_along_dim", "index", "nonzero", "where_index", "copy", "new_tensor", "tile",
}
FACTORY_NAMES = {
    "arange", "full", "zeros", "ones", "empty", "rand", "randn", "randint", "tensor",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
    "new_zeros", "new_ones", "new_full", "new_empty", "linspace", "eye", "tril_indices",
    "triu_indices",
}
NONDIFF_NAMES = {
    "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_not",
    "logical_xor", "isnan", "isinf", "isfinite", "and_", "or_", "xor", "invert", "bitwise_and",
    "bitwise_or", "bitwise_not", "floor", "ceil", "round", "sign", "floordiv", "floor_divide",
    "any", "all", "bincount", "histc", "searchsorted", "bucketize", "nonzero", "where1",
}
ADD_NAMES = {"add", "iadd", "sub", "isub", "rsub", "__add__", "__radd__", "__sub__",
             "__rsub__", "__iadd__", "__isub__"}
INPLACE_OPERATOR_NAMES = {"setitem", "iadd", "isub", "imul", "itruediv", "ifloordiv", "ipow",
                          "imod", "iand", "ior", "ixor", "ilshift", "irshift", "imatmul"}

LAYER_RE = re.compile(r"(?:^|\.)(?:layers|layer|h|blocks|block)\.(?:[A-Za-z_]*?_)?(\d+)(?=\.|$)")
ATTENTION_RE = re.compile(r"attn|attention", re.IGNORECASE)


def layer_of(path):
    """Transformer block index from a module path ("model.layers.3.mlp" -> 3), else -1."""
    m = LAYER_RE.search(path or "")
    return int(m.group(1)) if m else -1


def function_name(target):
    if isinstance(target, str):
        return target
    name = getattr(target, "__name__", None) or str(target)
    return name


def canonical_name(name):
    """Operator dunder names to plain names: __add__ -> add, __radd__ -> add."""
    if name.startswith("__r") and name.endswith("__") and name[3:-2] in ("add", "sub", "mul",
                                                                          "truediv", "matmul",
                                                                          "pow", "floordiv"):
        return "r" + name[3:-2] if name[3:-2] == "sub" else name[3:-2]
    if name.startswith("__i") and name.endswith("__") and len(name) > 5:
        return "i" + name[3:-2]
    if name.startswith("__") and name.endswith("__"):
        return name[2:-2]
    return name

