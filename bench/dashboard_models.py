"""The dashboard model set: real models from timm, HuggingFace transformers and torchvision, plus
coil's own (bench/models.py), in the spirit of PyTorch's TIMM / HuggingFace / TorchBench suites.

Every model is built from its library with random weights: nothing is downloaded (no
``pretrained=True``, no ``from_pretrained``, HF models come from their config classes).

Interface (the dashboard runner depends on it):

* ``MODELS``: name -> :class:`ModelSpec`, insertion order is the dashboard order.
* ``ModelSpec.build(device, size)`` -> :class:`Built`; ``size`` is ``"cpu"`` (small enough for a
  2-core CPU: batch 2, images 64-128 px, sequences of 32, HF configs of 2 layers / hidden 128) or
  ``"gpu"`` (the usual sizes: batch 32-64 images at 224 px, batch 8-16 x seq 256-512 with
  BERT-base-like HF configs).
* ``Built.model`` is float32, on ``device``, in ``train()`` mode; ``forward(*Built.inputs)``
  returns a Tensor or a tuple of Tensors (HF models are wrapped to return ``logits`` /
  ``last_hidden_state``, segmentation models their ``"out"`` tensor).
* ``Built.inputs`` are made on the CPU from a ``torch.Generator`` seeded from the model's name,
  then moved to ``device``: the same on every run and every device. Weights are deterministic
  too: ``torch.manual_seed(0)`` runs before each build.
* :func:`loss_of` turns an output into a scalar to backprop.

Import order matters here: ``import torchvision`` fails with this CPU-only PyTorch (see
:func:`import_torchvision`), and both timm and transformers import torchvision, so every builder
calls :func:`import_torchvision` before importing its library. Libraries are imported lazily,
inside the builders: the registry itself needs only torch.
"""

from __future__ import annotations

import os
import sys
import types
import zlib
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn

_BENCH = os.path.dirname(os.path.abspath(__file__))
if _BENCH not in sys.path:
    sys.path.insert(0, _BENCH)

__all__ = [
    "ModelSpec", "Built", "MODELS", "SUITES", "loss_of", "get", "names", "import_torchvision",
]

SUITES = ("timm", "huggingface", "torchvision", "coil")
SIZES = ("cpu", "gpu")


@dataclass
class Built:
    model: nn.Module  # float32, on the device, train() mode; forward returns Tensor(s)
    inputs: tuple  # tensors on the device, deterministic
    batch: int


@dataclass(frozen=True)
class ModelSpec:
    name: str  # unique: "<suite prefix>_<model>", e.g. "timm_resnet18", "hf_bert"
    suite: str  # "timm" | "huggingface" | "torchvision" | "coil"
    build: Callable[[str, str], Built]  # (device, size) -> Built; size is "cpu" or "gpu"


def loss_of(output) -> torch.Tensor:
    """A scalar training loss for any model output: the sum, over the floating-point tensors of
    ``output`` (a Tensor, or a tuple/list of them, nested), of ``t.float().square().mean()``.

    Mean of squares rather than sum keeps the loss O(1) whatever the output's size; integer
    tensors (none expected) are ignored. A scalar loss output (coil's ``*_train`` models) simply
    becomes its square.
    """
    terms = []

    def visit(o):
        if isinstance(o, torch.Tensor):
            if o.is_floating_point():
                terms.append(o.float().square().mean())
        elif isinstance(o, (tuple, list)):
            for x in o:
                visit(x)

    visit(output)
    if not terms:
        raise ValueError(f"loss_of: no floating-point tensor in output of type {type(output)}")
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


# ---------------------------------------------------------------------------------------------
# helpers


def import_torchvision():
    """Imports torchvision, working around its C++ extension when it cannot load.

    torchvision 0.28's ``torchvision/_meta_registrations.py`` registers fake (meta) kernels for
    its custom operators (``torchvision::nms``, ``roi_align``, ...) at import time. With a
    PyTorch build its compiled extension does not match (CPU-only torch here), those operators
    were never defined, registration raises ``RuntimeError: operator torchvision::nms does not
    exist`` and the whole ``import torchvision`` fails. The models we use need none of those
    operators, so on failure we drop the half-imported torchvision modules, install an empty
    module in place of ``torchvision._meta_registrations`` and import again. A plain import is
    tried first, so a working torchvision is used as is. timm and transformers import
    torchvision too: import them only after this ran.
    """
    try:
        import torchvision  # noqa: F401
    except Exception:
        for k in [k for k in sys.modules if k == "torchvision" or k.startswith("torchvision.")]:
            del sys.modules[k]
        sys.modules["torchvision._meta_registrations"] = types.ModuleType(
            "torchvision._meta_registrations"
        )
        import torchvision  # noqa: F401
    return sys.modules["torchvision"]


def _gen(name: str) -> torch.Generator:
    """The per-model input generator: seeded from the name (stable across runs and processes)."""
    return torch.Generator().manual_seed(zlib.crc32(name.encode()))


def _finish(model: nn.Module, inputs: tuple, batch: int, device: str) -> Built:
    model = model.float().to(device).train()
    inputs = tuple(i.to(device) for i in inputs)
    return Built(model=model, inputs=inputs, batch=batch)


def _check_size(size: str) -> None:
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, got {size!r}")


MODELS: dict[str, ModelSpec] = {}


def _register(name: str, suite: str, build: Callable[[str, str], Built]) -> None:
    assert name not in MODELS, name
    assert suite in SUITES, suite
    MODELS[name] = ModelSpec(name=name, suite=suite, build=build)


def get(name: str) -> ModelSpec:
    try:
        return MODELS[name]
    except KeyError:
        raise KeyError(f"unknown dashboard model {name!r}; known: {', '.join(MODELS)}") from None


def names(suite: str | None = None) -> list[str]:
    if suite is not None and suite not in SUITES:
        raise ValueError(f"unknown suite {suite!r}; known: {SUITES}")
    return [n for n, s in MODELS.items() if suite is None or s.suite == suite]


class _FirstOutput(nn.Module):
    """Returns one tensor of a model whose forward returns a dict / ModelOutput / namedtuple."""

    def __init__(self, model: nn.Module, key: str):
        super().__init__()
        self.model = model
        self.key = key

    def forward(self, *inputs):
        out = self.model(*inputs)
        if isinstance(out, dict):
            return out[self.key]
        return getattr(out, self.key)


# ---------------------------------------------------------------------------------------------
# timm: (model name, create_model kwargs per size, cpu image size, gpu (batch, image size))
#
# Convnets take any image size at run time; ViT / DeiT / Swin / Mixer / CaiT / CoaT / LeViT fix
# their token grid at creation, so their "cpu" variant passes img_size= to create_model (and
# Swin a window that divides each stage's grid).

_TIMM_CPU_BATCH = 2

_TIMM = [
    # name, cpu img, cpu create kwargs, gpu batch, gpu img
    ("resnet18", 96, {}, 64, 224),
    ("resnet50", 96, {}, 32, 224),
    ("resnext26ts", 96, {}, 32, 224),
    ("regnetx_002", 96, {}, 64, 224),
    ("regnety_002", 96, {}, 64, 224),
    ("efficientnet_b0", 96, {}, 32, 224),
    ("mobilenetv3_small_100", 96, {}, 64, 224),
    ("mobilenetv3_large_100", 96, {}, 64, 224),
    ("ghostnet_100", 96, {}, 64, 224),
    ("densenet121", 64, {}, 32, 224),
    ("inception_v3", 96, {}, 32, 299),
    ("convnext_atto", 96, {}, 64, 224),
    ("convnext_tiny", 64, {}, 32, 224),
    ("vit_tiny_patch16_224", 96, {"img_size": 96}, 64, 224),
    ("deit_tiny_patch16_224", 96, {"img_size": 96}, 64, 224),
    ("swin_tiny_patch4_window7_224", 128, {"img_size": 128, "window_size": 4}, 32, 224),
    ("mixer_b16_224", 96, {"img_size": 96}, 32, 224),
    ("mobilevit_xxs", 128, {}, 64, 256),
    ("levit_128s", 96, {"img_size": 96}, 64, 224),
    ("poolformer_s12", 64, {}, 32, 224),
    ("coat_lite_tiny", 96, {"img_size": 96}, 32, 224),
    ("cait_xxs24_224", 64, {"img_size": 64}, 32, 224),
]


def _unzero_head(model: nn.Module) -> None:
    """Some timm models initialize their classifier to zeros (MLP-Mixer: ``head`` weight and
    bias are 0). Random weights then give all-zero logits, a zero loss_of and zero gradients
    everywhere, which a dashboard cannot check for accuracy. Such a head (and only such) is
    re-initialized like a fresh nn.Linear, from the already seeded global generator."""
    head = model.get_classifier() if hasattr(model, "get_classifier") else None
    if isinstance(head, nn.Linear) and not head.weight.detach().any():
        head.reset_parameters()


def _timm_builder(name: str, cpu_img: int, cpu_kwargs: dict, gpu_batch: int, gpu_img: int):
    full = "timm_" + name

    def build(device: str, size: str) -> Built:
        _check_size(size)
        import_torchvision()
        import timm

        torch.manual_seed(0)
        kwargs = dict(cpu_kwargs) if size == "cpu" else {}
        model = timm.create_model(name, pretrained=False, **kwargs)
        _unzero_head(model)
        batch, img = (_TIMM_CPU_BATCH, cpu_img) if size == "cpu" else (gpu_batch, gpu_img)
        x = torch.randn(batch, 3, img, img, generator=_gen(full))
        return _finish(model, (x,), batch, device)

    return full, build


for _args in _TIMM:
    _n, _b = _timm_builder(*_args)
    _register(_n, "timm", _b)


# ---------------------------------------------------------------------------------------------
# HuggingFace transformers, built from config classes.
#
# Dimensions per size: "cpu" is 2 layers, hidden 128, 4 heads, FFN 256, vocab 1000, batch 2 x
# seq 32; "gpu" is BERT-base-like: 12 layers (6 for the Llama-style decoders: Llama, Mistral,
# Qwen2, Phi, Gemma), hidden 768, 12 heads, FFN 3072, vocab 32000, batch 8 x seq 512. ViT,
# Whisper's encoder and MobileBERT have their own (see their builders). Models take SDPA
# attention where they support it (DeBERTa-v2 and GPT-Neo fall back to eager). Dropout stays
# at the configs' defaults: models are in train() mode.

_HF_DIMS = {
    "cpu": dict(layers=2, hidden=128, heads=4, ffn=256, vocab=1000, batch=2, seq=32, llm_layers=2),
    "gpu": dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=32000, batch=8, seq=512,
                llm_layers=6),
}


def _hf_instantiate(cls, cfg):
    """Builds `cls` from `cfg` with SDPA attention where the model supports it, else eager."""
    for impl in ("sdpa", "eager"):
        try:
            return cls._from_config(cfg, attn_implementation=impl, dtype=torch.float32)
        except (ValueError, ImportError, NotImplementedError):
            if impl == "eager":
                raise
    raise AssertionError("unreachable")


class _HFWrapper(nn.Module):
    """forward(*tensors) -> one plain tensor: calls the HF model with keyword arguments
    ``arg_names`` and returns ``out.<key>`` (logits or last_hidden_state)."""

    def __init__(self, model: nn.Module, arg_names: tuple[str, ...], key: str):
        super().__init__()
        self.model = model
        self.arg_names = arg_names
        self.key = key

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.arg_names, inputs)))
        return out[self.key]  # a ModelOutput: indexing by name gives the field


def _tokens(name, d, vocab=None):
    return torch.randint(0, vocab or d["vocab"], (d["batch"], d["seq"]), generator=_gen(name))


def _hf_text(config_fn, cls_name: str, key: str = "logits", seq2seq: bool = False):
    """A builder for a token model: `config_fn(d)` -> config; inputs input_ids (and
    decoder_input_ids of the same shape for encoder-decoders)."""

    def build(name, device, size):
        import transformers

        d = _HF_DIMS[size]
        cfg = config_fn(transformers, d)
        cls = getattr(transformers, cls_name)
        model = _hf_instantiate(cls, cfg)
        ids = _tokens(name, d)
        if seq2seq:
            dec = torch.randint(0, d["vocab"], (d["batch"], d["seq"]), generator=_gen(name + "/dec"))
            return _HFWrapper(model, ("input_ids", "decoder_input_ids"), key), (ids, dec), d["batch"]
        return _HFWrapper(model, ("input_ids",), key), (ids,), d["batch"]

    return build


def _common(d, layers=None, **extra):
    return dict(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=layers or d["layers"],
        num_attention_heads=d["heads"], intermediate_size=d["ffn"],
        max_position_embeddings=max(512, d["seq"] + 2), use_cache=False, **extra,
    )


def _llm(d, **extra):
    return _common(d, layers=d["llm_layers"], num_key_value_heads=d["heads"], **extra)


def _hf_vit(name, device, size):
    import transformers

    if size == "cpu":
        d = _HF_DIMS["cpu"]
        img, batch = 64, 2
    else:
        d = _HF_DIMS["gpu"]
        img, batch = 224, 32
    cfg = transformers.ViTConfig(
        hidden_size=d["hidden"], num_hidden_layers=d["layers"], num_attention_heads=d["heads"],
        intermediate_size=d["ffn"], image_size=img, patch_size=16, num_labels=1000,
    )
    model = _hf_instantiate(transformers.ViTForImageClassification, cfg)
    x = torch.randn(batch, 3, img, img, generator=_gen(name))
    return _HFWrapper(model, ("pixel_values",), "logits"), (x,), batch


def _hf_whisper_encoder(name, device, size):
    import transformers
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    if size == "cpu":
        d_model, layers, heads, ffn, frames, batch = 128, 2, 4, 256, 64, 2
    else:  # whisper-base-like encoder on 30 s of audio (3000 mel frames)
        d_model, layers, heads, ffn, frames, batch = 512, 6, 8, 2048, 1500, 8
    cfg = transformers.WhisperConfig(
        num_mel_bins=80, d_model=d_model, encoder_layers=layers, encoder_attention_heads=heads,
        encoder_ffn_dim=ffn, decoder_layers=layers, decoder_attention_heads=heads,
        decoder_ffn_dim=ffn, max_source_positions=frames, vocab_size=1000, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, use_cache=False,
    )
    model = _hf_instantiate(WhisperEncoder, cfg)
    # The encoder checks its input length: 2 * max_source_positions mel frames (two convs, the
    # second of stride 2).
    x = torch.randn(batch, 80, 2 * frames, generator=_gen(name))
    return _HFWrapper(model, ("input_features",), "last_hidden_state"), (x,), batch


_HF = [
    ("bert", _hf_text(lambda t, d: t.BertConfig(**_common(d)), "BertForMaskedLM")),
    ("distilbert", _hf_text(lambda t, d: t.DistilBertConfig(
        vocab_size=d["vocab"], dim=d["hidden"], n_layers=d["layers"], n_heads=d["heads"],
        hidden_dim=d["ffn"], max_position_embeddings=512), "DistilBertForMaskedLM")),
    ("roberta", _hf_text(lambda t, d: t.RobertaConfig(**_common(d)), "RobertaForMaskedLM")),
    ("albert", _hf_text(lambda t, d: t.AlbertConfig(
        embedding_size=128, **_common(d)), "AlbertForMaskedLM")),
    ("electra", _hf_text(lambda t, d: t.ElectraConfig(
        embedding_size=d["hidden"] // 2 if d["hidden"] > 128 else 128, **_common(d)),
        "ElectraForMaskedLM")),
    ("deberta_v2", _hf_text(lambda t, d: t.DebertaV2Config(**_common(d)),
                            "DebertaV2ForMaskedLM")),
    # MobileBERT's bottleneck layout: "cpu" is a scaled-down copy of mobilebert-uncased's
    # shape (hidden 128, bottleneck 64); "gpu" is mobilebert-uncased's (24 layers, hidden 512).
    ("mobilebert", _hf_text(lambda t, d: t.MobileBertConfig(
        vocab_size=d["vocab"], max_position_embeddings=512, num_attention_heads=4,
        **(dict(hidden_size=128, num_hidden_layers=2, intermediate_size=128, embedding_size=64,
                intra_bottleneck_size=64, true_hidden_size=64) if d["hidden"] == 128 else
           dict(hidden_size=512, num_hidden_layers=24, intermediate_size=512, embedding_size=128,
                intra_bottleneck_size=128, true_hidden_size=128))), "MobileBertForMaskedLM")),
    ("gpt2", _hf_text(lambda t, d: t.GPT2Config(
        vocab_size=d["vocab"], n_embd=d["hidden"], n_layer=d["layers"], n_head=d["heads"],
        n_inner=d["ffn"], n_positions=max(1024, d["seq"]), bos_token_id=0, eos_token_id=0,
        use_cache=False), "GPT2LMHeadModel")),
    ("gpt_neo", _hf_text(lambda t, d: t.GPTNeoConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_layers=d["layers"],
        attention_types=[[["global", "local"], d["layers"] // 2]], num_heads=d["heads"],
        intermediate_size=d["ffn"], max_position_embeddings=max(1024, d["seq"]), window_size=256,
        bos_token_id=0, eos_token_id=0, use_cache=False), "GPTNeoForCausalLM")),
    ("opt", _hf_text(lambda t, d: t.OPTConfig(
        vocab_size=d["vocab"], hidden_size=d["hidden"], num_hidden_layers=d["layers"],
        num_attention_heads=d["heads"], ffn_dim=d["ffn"], word_embed_proj_dim=d["hidden"],
        max_position_embeddings=max(1024, d["seq"]), use_cache=False), "OPTForCausalLM")),
    ("t5", _hf_text(lambda t, d: t.T5Config(
        vocab_size=d["vocab"], d_model=d["hidden"], d_kv=d["hidden"] // d["heads"],
        d_ff=d["ffn"], num_layers=d["layers"], num_decoder_layers=d["layers"],
        num_heads=d["heads"], decoder_start_token_id=0, use_cache=False),
        "T5ForConditionalGeneration", seq2seq=True)),
    ("bart", _hf_text(lambda t, d: t.BartConfig(
        vocab_size=d["vocab"], d_model=d["hidden"], encoder_layers=d["layers"],
        decoder_layers=d["layers"], encoder_attention_heads=d["heads"],
        decoder_attention_heads=d["heads"], encoder_ffn_dim=d["ffn"], decoder_ffn_dim=d["ffn"],
        max_position_embeddings=max(1024, d["seq"]), use_cache=False),
        "BartForConditionalGeneration", seq2seq=True)),
    ("llama", _hf_text(lambda t, d: t.LlamaConfig(**_llm(d)), "LlamaForCausalLM")),
    ("mistral", _hf_text(lambda t, d: t.MistralConfig(
        **_llm(d), sliding_window=None), "MistralForCausalLM")),
    ("qwen2", _hf_text(lambda t, d: t.Qwen2Config(**_llm(d)), "Qwen2ForCausalLM")),
    ("phi", _hf_text(lambda t, d: t.PhiConfig(**_llm(d)), "PhiForCausalLM")),
    ("gemma", _hf_text(lambda t, d: t.GemmaConfig(
        **_llm(d), head_dim=d["hidden"] // d["heads"]), "GemmaForCausalLM")),
    ("vit", _hf_vit),
    ("whisper_encoder", _hf_whisper_encoder),
]


def _hf_builder(short: str, fn):
    full = "hf_" + short

    def build(device: str, size: str) -> Built:
        _check_size(size)
        import_torchvision()  # transformers imports torchvision (image utils)
        torch.manual_seed(0)
        model, inputs, batch = fn(full, device, size)
        return _finish(model, inputs, batch, device)

    return full, build


for _short, _fn in _HF:
    _n, _b = _hf_builder(_short, _fn)
    _register(_n, "huggingface", _b)


# ---------------------------------------------------------------------------------------------
# torchvision: (name, segmentation?, cpu image size, gpu batch, gpu image size)

_TV = [
    ("resnet18", False, 96, 64, 224),
    ("resnet50", False, 96, 32, 224),
    ("mobilenet_v2", False, 96, 64, 224),
    ("mobilenet_v3_small", False, 96, 64, 224),
    ("efficientnet_b0", False, 96, 32, 224),
    ("shufflenet_v2_x0_5", False, 96, 64, 224),
    ("squeezenet1_1", False, 96, 64, 224),
    ("mnasnet0_5", False, 96, 64, 224),
    ("regnet_y_400mf", False, 96, 64, 224),
    ("fcn_resnet50", True, 64, 8, 224),
    ("deeplabv3_mobilenet_v3_large", True, 96, 16, 224),
    ("lraspp_mobilenet_v3_large", True, 96, 16, 224),
]


def _tv_builder(name: str, seg: bool, cpu_img: int, gpu_batch: int, gpu_img: int):
    full = "tv_" + name

    def build(device: str, size: str) -> Built:
        _check_size(size)
        tv = import_torchvision()
        import torchvision.models  # noqa: F401
        import torchvision.models.segmentation  # noqa: F401

        torch.manual_seed(0)
        if seg:
            fn = getattr(tv.models.segmentation, name)
            model = _FirstOutput(fn(weights=None, weights_backbone=None), "out")
        else:
            model = getattr(tv.models, name)(weights=None)
        # Batch 2 at least: train-mode BatchNorm after a global pooling (ASPP) needs > 1 value.
        batch, img = (2, cpu_img) if size == "cpu" else (gpu_batch, gpu_img)
        x = torch.randn(batch, 3, img, img, generator=_gen(full))
        return _finish(model, (x,), batch, device)

    return full, build


for _args in _TV:
    _n, _b = _tv_builder(*_args)
    _register(_n, "torchvision", _b)


# ---------------------------------------------------------------------------------------------
# coil's own models (bench/models.py): "cpu" -> their "test" size, "gpu" -> "bench". Their
# builders seed torch and make their inputs themselves (deterministic); the *_train ones (and
# mlp_sgd) return a scalar loss. Like every model here they come back in train() mode,
# resnet18_eval included (its builder sets non-trivial BatchNorm running stats, which matter
# once a runner puts it in eval()).

_COIL = ["attention_block", "transformer_block", "gpt2", "resnet18_train", "resnet18_eval",
         "mlp_sgd"]


def _coil_builder(key: str):
    def build(device: str, size: str) -> Built:
        _check_size(size)
        import models as coil_models

        builder, _trains = coil_models.MODELS[key]
        torch.manual_seed(0)
        model, inputs = builder("test" if size == "cpu" else "bench")
        return _finish(model, tuple(inputs), int(inputs[0].shape[0]), device)

    return "coil_" + key, build


for _key in _COIL:
    _n, _b = _coil_builder(_key)
    _register(_n, "coil", _b)

del _args, _short, _fn, _key, _n, _b
