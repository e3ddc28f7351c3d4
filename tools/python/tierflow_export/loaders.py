"""Models: a Hugging Face causal LM built from its config.json or a torchvision model,
with parameters created on the meta device and filled with seeded weights, a seeded
sample input, and the fx GraphModule traced from it. Nothing is downloaded."""

import contextlib
import inspect
import json
import math
import os

from .errors import ExportError, one_line
from .tracer import hf_real_value_tracer, scoped_tracer

TORCH_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp32": "float32"}
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
FILL_BLOCK = 1_000_003  # a prime: rows of a tiled weight never repeat one another


@contextlib.contextmanager
def parameters_on_meta(torch):
    """Every parameter registered inside is moved to the meta device (no memory, no
    initialisation). torch 1.13 has no default-device context; modules create their
    parameters with torch.empty (memory never touched) and register them, which is where
    this moves them. Buffers stay where they are."""
    register = torch.nn.Module.register_parameter

    def register_on_meta(module, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register(module, name, param)

    torch.nn.Module.register_parameter = register_on_meta
    try:
        yield
    finally:
        torch.nn.Module.register_parameter = register


def fill_weights(model, torch, seed):
    """Gives a model built under parameters_on_meta real, deterministic weights, fast:
    matrices are a seeded normal block, tiled and scaled by 1/sqrt(fan-in); biases are 0,
    other vectors (norm weights) 1. Only the MoE routing depends on the values."""
    buffers = {name: b.detach().clone() for name, b in model.named_buffers()}
    # to_empty makes a new Parameter per module, which unties tied weights: note where
    # each parameter is used, to tie them again.
    places = {}
    for module in model.modules():
        for key, p in module._parameters.items():
            if p is not None:
                places.setdefault(id(p), []).append((module, key))
    model.to_empty(device="cpu")
    for uses in places.values():
        first = uses[0][0]._parameters[uses[0][1]]
        for module, key in uses[1:]:
            module._parameters[key] = first
    gen = torch.Generator().manual_seed(seed)
    block = torch.randn(FILL_BLOCK, generator=gen, dtype=torch.float64)
    block = torch.cat([block, block])
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(buffers[name])
        for index, (name, p) in enumerate(model.named_parameters()):
            flat = p.view(-1)
            if p.dim() >= 2:
                scale = 1.0 / math.sqrt(max(1, p.numel() // p.shape[0]))
                offset = (index * 7919) % FILL_BLOCK
                for start in range(0, flat.numel(), FILL_BLOCK):
                    n = min(FILL_BLOCK, flat.numel() - start)
                    flat[start:start + n].copy_(block[offset:offset + n] * scale)
            elif name.endswith("bias"):
                flat.zero_()
            else:
                flat.fill_(1.0)
    return model


def load_hf(args, torch):
    """The model of --hf-config: (model, gm, inputs, input labels, info, stem)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    config_dict = read_hf_config(args.hf_config)
    model_type = config_dict.pop("model_type")
    hf_fx_module()  # before the minute a large model takes to build
    model, config = build_hf_model(args, torch, model_type, config_dict)
    check_context(args, config)
    check_memory(args, model, config)
    model = fill_weights(model, torch, args.seed).eval()
    vocab = config.vocab_size
    gen = torch.Generator().manual_seed(args.seed)
    sample = {"input_ids": torch.randint(0, vocab, (args.batch, args.seq), generator=gen),
              "attention_mask": torch.ones(args.batch, args.seq, dtype=torch.long)}
    names = list(sample)
    gm = trace_hf(model, sample, torch)
    stem = os.path.splitext(os.path.basename(args.hf_config))[0]
    info = {"model": config_dict.get("_name_or_path") or stem, "family": model_type,
            "class": type(model).__name__}
    return model, gm, [sample[k] for k in names], {}, info, stem


def check_context(args, config):
    """ExportError when --seq is beyond the positions the model is made for."""
    limit = getattr(config, "max_position_embeddings", None)
    if isinstance(limit, int) and limit > 0 and args.seq > limit:
        raise ExportError(f"--seq {args.seq} is more than the {limit} positions of "
                          f"{args.hf_config} (max_position_embeddings)")


def available_memory():
    """MemAvailable plus SwapFree of /proc/meminfo in bytes, or None where there is none."""
    fields = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in ("MemAvailable", "SwapFree"):
                    fields[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None if "MemAvailable" not in fields else sum(fields.values())


def export_memory(args, model, config):
    """A floor on the memory that running the model on the CPU takes: its weights, and one
    layer's attention scores in eager attention (batch x heads x seq^2, in the model's dtype
    and again in fp32 for the softmax)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    heads = getattr(config, "num_attention_heads", 0) or 0
    scores = args.batch * heads * args.seq * args.seq * (DTYPE_BYTES[args.dtype] + 4)
    return weights + scores


def check_memory(args, model, config):
    """ExportError when that floor is above the memory available (with swap): the export
    runs the model for real, and a process out of memory is killed without a word."""
    need, have = export_memory(args, model, config), available_memory()
    if have is not None and need > have:
        raise ExportError(f"running {args.hf_config} at batch {args.batch}, {args.seq} tokens "
                          f"takes at least {need / 2**30:.1f} GiB (its weights and one "
                          f"layer's attention scores) and {have / 2**30:.1f} GiB is "
                          "available: use a smaller --batch or --seq, or a larger machine")


def read_hf_config(path):
    """The dict of a Hugging Face config.json, which must name a model_type."""
    try:
        with open(path, encoding="utf-8") as f:
            config_dict = json.load(f)
    except OSError as e:
        raise ExportError(f"{path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ExportError(f"{path}:{e.lineno}:{e.colno}: {e.msg}") from None
    if not isinstance(config_dict, dict) or "model_type" not in config_dict:
        raise ExportError(f"{path}: a Hugging Face config.json with a model_type "
                          "is expected")
    return config_dict


def build_hf_model(args, torch, model_type, config_dict):
    """(model, config): AutoModelForCausalLM built from the config with its parameters on
    the meta device, eager attention and no KV cache."""
    import transformers
    from transformers import AutoConfig, AutoModelForCausalLM
    transformers.logging.set_verbosity_error()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    if model_type not in CONFIG_MAPPING:
        import difflib
        close = difflib.get_close_matches(str(model_type), list(CONFIG_MAPPING.keys()), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ExportError(f"{args.hf_config}: model_type {model_type!r} is not known to "
                          f"transformers {transformers.__version__}{hint}")
    try:
        config = AutoConfig.for_model(model_type, **config_dict)
    except (ValueError, KeyError, TypeError) as e:
        raise ExportError(f"{args.hf_config}: {one_line(e)}") from None
    config.use_cache = False
    try:
        with parameters_on_meta(torch):
            model = AutoModelForCausalLM.from_config(
                config, attn_implementation="eager",
                torch_dtype=getattr(torch, TORCH_DTYPES[args.dtype]))
    except Exception as e:  # noqa: BLE001 - any failure to build is a bad config
        raise ExportError(f"{args.hf_config}: cannot build the model: {one_line(e)}") from None
    return model, config


def hf_fx_module():
    """transformers.utils.fx, the torch.fx tracer of Hugging Face models, or ExportError:
    transformers 5 removed it."""
    import transformers
    try:
        from transformers.utils import fx
    except ImportError:
        raise ExportError(
            f"transformers {transformers.__version__} has no torch.fx tracer "
            "(transformers.utils.fx, removed in 5.0), which the exporter traces Hugging Face "
            "models with: run it with transformers 4 (tools/requirements.txt pins 4.47.1, "
            "which scripts/setup-python.sh installs)") from None
    return fx


def trace_hf(model, sample, torch):
    """The fx GraphModule of a Hugging Face model traced on the sample input (a dict by
    input name; its order is the placeholders')."""
    import torch.fx as fx
    hf_fx = hf_fx_module()
    tracer_cls, failures = hf_real_value_tracer(hf_fx, fx, model, sample)
    try:
        with torch.no_grad():
            return hf_fx.symbolic_trace(model, input_names=list(sample), tracer_cls=tracer_cls)
    except Exception as e:  # noqa: BLE001
        cause = f" (running the model failed first at {failures[0]})" if failures else ""
        raise ExportError(f"cannot trace {type(model).__name__} with torch.fx: "
                          f"{one_line(e)}{cause}") from None


def load_torchvision(args, torch):
    """The model of --torchvision: (model, gm, inputs, input labels, info, stem)."""
    import torch.fx as fx
    import torchvision
    builder = getattr(torchvision.models, args.torchvision, None)
    if builder is None or not callable(builder) or args.torchvision.startswith("_"):
        raise ExportError(f"--torchvision: no model {args.torchvision!r} in torchvision "
                          f"{torchvision.__version__}")
    kwargs = {"weights": None}
    if args.image_size and "image_size" in inspect.signature(
            getattr(torchvision.models, "VisionTransformer").__init__).parameters and \
            args.torchvision.startswith("vit_"):
        kwargs["image_size"] = args.image_size  # ViTs size their position embedding by it
    try:
        with parameters_on_meta(torch):
            model = builder(**kwargs)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"--torchvision {args.torchvision}: {one_line(e)}") from None
    model = fill_weights(model, torch, args.seed).to(
        getattr(torch, TORCH_DTYPES[args.dtype])).eval()
    size = args.image_size or getattr(model, "image_size", 224)
    gen = torch.Generator().manual_seed(args.seed)
    image = torch.randn(args.batch, 3, size, size, generator=gen).to(
        getattr(torch, TORCH_DTYPES[args.dtype]))
    tracer = scoped_tracer(fx.Tracer, model)()
    try:
        graph = tracer.trace(model)
        gm = fx.GraphModule(model, graph)
    except Exception as e:  # noqa: BLE001
        raise ExportError(f"cannot trace {args.torchvision} with torch.fx: {one_line(e)}") from None
    info = {"model": args.torchvision, "family": "torchvision", "image_size": size}
    return model, gm, [image], {"x": "image"}, info, args.torchvision


def moe_block_paths(model, torch):
    """Paths of the modules holding a ModuleList of experts (sparse MoE blocks)."""
    return sorted(name for name, m in model.named_modules()
                  if isinstance(getattr(m, "experts", None), torch.nn.ModuleList))
