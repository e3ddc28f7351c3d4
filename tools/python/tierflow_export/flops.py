"""FLOP conventions (documented in docs/torch_export.md). A multiply-add is 2 FLOPs."""

import math

NORM_FLOPS_PER_ELEMENT = 5  # LayerNorm / RMSNorm / GroupNorm / BatchNorm, per output element
SOFTMAX_FLOPS_PER_ELEMENT = 5  # max, subtract, exp, sum, divide
LOSS_FLOPS_PER_LOGIT = 5  # cross-entropy: log-softmax and the pick of the label
ADAMW_FLOPS_PER_ELEMENT = 12  # two moment updates, bias corrections, sqrt, divide, decay
BACKWARD_FACTOR = 2  # non-matmul backward op: 2x the FLOPs of its forward op

# FLOPs per output element of elementwise functions and activations (default 1).
ELEMENTWISE_COST = {
    "gelu": 8, "silu": 4, "sigmoid": 4, "tanh": 4, "softplus": 4, "mish": 8,
    "hardswish": 4, "hardsigmoid": 3, "elu": 3, "selu": 4, "leaky_relu": 2,
    "softmax": SOFTMAX_FLOPS_PER_ELEMENT, "log_softmax": SOFTMAX_FLOPS_PER_ELEMENT,
}


def einsum_flops(equation, operands):
    """2 x the product of every index size (each output element sums over the rest)."""
    lhs = equation.replace(" ", "").split("->")[0]
    sizes = {}
    for spec, t in zip(lhs.split(","), operands):
        spec = spec.replace("...", "")
        dims = list(t.shape)[-len(spec):] if spec else []
        for c, s in zip(spec, dims):
            sizes[c] = s
    return 2 * math.prod(sizes.values()) if sizes else 0

