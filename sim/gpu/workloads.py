"""Workloads computed from architecture definitions: per layer, parameters, forward and backward
FLOPs and HBM bytes, activation sizes. Nothing here is a hard-coded total; the published
parameter counts are tests (``tests/test_workloads.py``).

Conventions: FLOPs count a multiply-add as 2. Backward is dgrad + wgrad, twice the forward
FLOPs of a layer with weights (Kaplan et al. 2020). Activations are stored in ``dtype_bytes``
(2 for mixed precision); gradients are all-reduced in ``grad_bytes`` (4: under PyTorch automatic
mixed precision parameters and their gradients stay FP32, which is what DDP buckets hold).
"""

from dataclasses import dataclass, field

from sim.gpu.presets import check_count

__all__ = ["Layer", "Workload", "resnet50", "vgg16", "bert_large", "gpt2_xl", "transformer",
           "MODELS", "build_workload", "MAX_DIMENSION", "MAX_LAYERS", "POSITIONS"]


@dataclass(frozen=True)
class Layer:
    """One layer of a model, for one micro-batch on one GPU.

    Attributes
    ----------
    name : str
    kind : str
        ``conv``, ``linear``, ``norm``, ``act``, ``pool``, ``attention``, ``embedding``, ``add``.
    params : int
        Trainable parameters (elements).
    fwd_flops, bwd_flops : float
    fwd_bytes, bwd_bytes : float
        HBM bytes read and written by the forward / backward kernels.
    activation_bytes : int
        Output activation size, bytes.
    tensor_core : bool
        Whether the layer's FLOPs run on tensor cores (GEMM/conv) or on the FP32 pipes.
    """

    name: str
    kind: str
    params: int
    fwd_flops: float
    bwd_flops: float
    fwd_bytes: float
    bwd_bytes: float
    activation_bytes: int
    tensor_core: bool = True


@dataclass
class Workload:
    """A model as an ordered list of layers (forward order)."""

    name: str
    batch: int
    layers: list = field(default_factory=list)
    dtype_bytes: int = 2
    grad_bytes: int = 4

    @property
    def params(self):
        return sum(layer.params for layer in self.layers)

    @property
    def gradient_bytes(self):
        return self.params * self.grad_bytes

    @property
    def fwd_flops(self):
        return sum(layer.fwd_flops for layer in self.layers)

    @property
    def bwd_flops(self):
        return sum(layer.bwd_flops for layer in self.layers)


class _Builder:
    def __init__(self, name, batch, dtype_bytes=2):
        self.w = Workload(name, batch, dtype_bytes=dtype_bytes)
        self.b = dtype_bytes

    def add(self, name, kind, params, flops, in_elems, out_elems, tensor_core=True,
            weighted=True):
        """``in_elems``/``out_elems`` are activation elements for the whole micro-batch."""
        b = self.b
        fwd_bytes = (in_elems + out_elems + params) * b
        # backward reads the output gradient, the saved input and weights, writes the input
        # gradient (and the weight gradient)
        bwd_bytes = (2 * in_elems + out_elems + 2 * params) * b
        bwd_flops = 2 * flops if weighted else flops
        self.w.layers.append(Layer(name, kind, params, float(flops), float(bwd_flops),
                                   float(fwd_bytes), float(bwd_bytes), out_elems * b,
                                   tensor_core))


# -- CNNs -------------------------------------------------------------------------------------

def _conv(bld, name, cin, cout, k, stride, h, w, batch, bias=False, pad=None):
    pad = k // 2 if pad is None else pad
    ho, wo = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    params = k * k * cin * cout + (cout if bias else 0)
    flops = 2 * k * k * cin * cout * ho * wo * batch
    bld.add(name, "conv", params, flops, batch * cin * h * w, batch * cout * ho * wo)
    return ho, wo


def _bn_relu(bld, name, c, h, w, batch, relu=True):
    elems = batch * c * h * w
    bld.add(f"{name}.bn", "norm", 2 * c, 8 * elems, elems, elems, tensor_core=False,
            weighted=False)
    if relu:
        bld.add(f"{name}.relu", "act", 0, elems, elems, elems, tensor_core=False,
                weighted=False)


def resnet50(batch=256, image=224, classes=1000):
    """torchvision ResNet-50 (bottleneck blocks [3, 4, 6, 3], expansion 4)."""
    bld = _Builder("resnet50", batch)
    h, w = _conv(bld, "conv1", 3, 64, 7, 2, image, image, batch, pad=3)
    _bn_relu(bld, "bn1", 64, h, w, batch)
    h, w = (h + 2 - 3) // 2 + 1, (w + 2 - 3) // 2 + 1   # 3x3/2 max pool
    bld.add("maxpool", "pool", 0, batch * 64 * h * w * 9, batch * 64 * h * w * 4,
            batch * 64 * h * w, tensor_core=False, weighted=False)
    cin = 64
    for stage, (blocks, width, stride) in enumerate(zip((3, 4, 6, 3), (64, 128, 256, 512),
                                                         (1, 2, 2, 2)), start=1):
        for block in range(blocks):
            s = stride if block == 0 else 1
            prefix = f"layer{stage}.{block}"
            _conv(bld, f"{prefix}.conv1", cin, width, 1, 1, h, w, batch)
            _bn_relu(bld, f"{prefix}.bn1", width, h, w, batch)
            h2, w2 = _conv(bld, f"{prefix}.conv2", width, width, 3, s, h, w, batch)
            _bn_relu(bld, f"{prefix}.bn2", width, h2, w2, batch)
            _conv(bld, f"{prefix}.conv3", width, width * 4, 1, 1, h2, w2, batch)
            _bn_relu(bld, f"{prefix}.bn3", width * 4, h2, w2, batch, relu=False)
            if block == 0:
                _conv(bld, f"{prefix}.downsample", cin, width * 4, 1, s, h, w, batch, pad=0)
                _bn_relu(bld, f"{prefix}.downsample", width * 4, h2, w2, batch, relu=False)
            elems = batch * width * 4 * h2 * w2
            bld.add(f"{prefix}.add_relu", "add", 0, 2 * elems, 2 * elems, elems,
                    tensor_core=False, weighted=False)
            cin, h, w = width * 4, h2, w2
    bld.add("avgpool", "pool", 0, batch * cin * h * w, batch * cin * h * w, batch * cin,
            tensor_core=False, weighted=False)
    bld.add("fc", "linear", cin * classes + classes, 2 * batch * cin * classes, batch * cin,
            batch * classes)
    return bld.w


def vgg16(batch=256, image=224, classes=1000):
    """torchvision VGG-16 (configuration D, no batch norm)."""
    bld = _Builder("vgg16", batch)
    cfg = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M",
           512, 512, 512, "M"]
    cin, h, w = 3, image, image
    index = 0
    for item in cfg:
        if item == "M":
            elems = batch * cin * h * w
            h, w = h // 2, w // 2
            bld.add(f"pool{index}", "pool", 0, elems, elems, elems // 4, tensor_core=False,
                    weighted=False)
            continue
        _conv(bld, f"features.{index}", cin, item, 3, 1, h, w, batch, bias=True)
        elems = batch * item * h * w
        bld.add(f"features.{index}.relu", "act", 0, elems, elems, elems, tensor_core=False,
                weighted=False)
        cin = item
        index += 1
    features = cin * 7 * 7   # adaptive average pool to 7x7
    for name, fin, fout in (("fc6", features, 4096), ("fc7", 4096, 4096),
                            ("fc8", 4096, classes)):
        bld.add(name, "linear", fin * fout + fout, 2 * batch * fin * fout, batch * fin,
                batch * fout)
    return bld.w


# -- Transformers -----------------------------------------------------------------------------

def _linear(bld, name, tokens, fin, fout, bias=True):
    bld.add(name, "linear", fin * fout + (fout if bias else 0), 2 * tokens * fin * fout,
            tokens * fin, tokens * fout)


def _layernorm(bld, name, tokens, hidden):
    elems = tokens * hidden
    bld.add(name, "norm", 2 * hidden, 8 * elems, elems, elems, tensor_core=False,
            weighted=False)


def _attention_core(bld, name, batch, seq, hidden, heads):
    """Scores, softmax and weighted sum (no parameters)."""
    tokens = batch * seq
    flops = 2 * 2 * batch * seq * seq * hidden          # QK^T and AV
    score_elems = batch * heads * seq * seq
    bld.add(name, "attention", 0, flops, 3 * tokens * hidden + 2 * score_elems,
            tokens * hidden + score_elems, weighted=True)


def transformer(hidden=1024, layers=24, seq=512, batch=8, heads=None, vocab=30522,
                positions=512, ffn=None, token_types=0, pooler=False, final_norm=False,
                name="transformer"):
    """A generic transformer encoder/decoder stack (pre- or post-norm alike for costs).

    The embedding table's gradient is dense (as in PyTorch DDP without sparse gradients).
    """
    heads = heads or max(1, hidden // 64)
    ffn = ffn or 4 * hidden
    tokens = batch * seq
    bld = _Builder(name, batch)
    emb_params = vocab * hidden + positions * hidden + token_types * hidden
    bld.add("embeddings", "embedding", emb_params, 4 * tokens * hidden, tokens,
            tokens * hidden, tensor_core=False, weighted=False)
    if token_types:   # BERT normalises the embeddings
        _layernorm(bld, "embeddings.norm", tokens, hidden)
    for i in range(layers):
        p = f"layer{i}"
        if not token_types:
            _layernorm(bld, f"{p}.ln1", tokens, hidden)
        _linear(bld, f"{p}.qkv", tokens, hidden, 3 * hidden)
        _attention_core(bld, f"{p}.attention", batch, seq, hidden, heads)
        _linear(bld, f"{p}.attn_out", tokens, hidden, hidden)
        _layernorm(bld, f"{p}.ln_attn" if token_types else f"{p}.ln2", tokens, hidden)
        _linear(bld, f"{p}.ffn_in", tokens, hidden, ffn)
        elems = tokens * ffn
        bld.add(f"{p}.gelu", "act", 0, 8 * elems, elems, elems, tensor_core=False,
                weighted=False)
        _linear(bld, f"{p}.ffn_out", tokens, ffn, hidden)
        if token_types:
            _layernorm(bld, f"{p}.ln_ffn", tokens, hidden)
    if final_norm:
        _layernorm(bld, "ln_f", tokens, hidden)
    if pooler:
        _linear(bld, "pooler", batch, hidden, hidden)
    # Output projection onto the vocabulary (weights tied to the embedding: no new params).
    bld.add("lm_head", "linear", 0, 2 * tokens * hidden * vocab, tokens * hidden,
            tokens * vocab)
    return bld.w


def bert_large(batch=8, seq=512):
    """BERT-large: 24 layers, hidden 1024, 16 heads, vocabulary 30522, with the pooler."""
    return transformer(hidden=1024, layers=24, seq=seq, batch=batch, heads=16, vocab=30522,
                       positions=512, token_types=2, pooler=True, name="bert_large")


def gpt2_xl(batch=4, seq=1024):
    """GPT-2 XL: 48 layers, hidden 1600, 25 heads, vocabulary 50257, context 1024."""
    return transformer(hidden=1600, layers=48, seq=seq, batch=batch, heads=25, vocab=50257,
                       positions=1024, final_norm=True, name="gpt2_xl")


MODELS = {"resnet50": resnet50, "vgg16": vgg16, "bert_large": bert_large, "gpt2_xl": gpt2_xl}


#: Largest batch, sequence length and hidden size :func:`build_workload` takes: enough that
#: every FLOP and byte count stays a finite float (a workload near it does not fit a GPU's
#: memory anyway, which the iteration model checks against the GPU).
MAX_DIMENSION = 1 << 24
#: Most transformer layers :func:`build_workload` takes: a hundred times the deepest published
#: stacks (GPT-3 96, Megatron-Turing NLG 105); the iteration model simulates every layer.
MAX_LAYERS = 10_000
#: Position embeddings of the published models: the longest sequence each takes.
POSITIONS = {"bert_large": 512, "gpt2_xl": 1024}


def build_workload(name, batch=None, **kwargs):
    """A workload by name (``resnet50``, ``vgg16``, ``bert_large``, ``gpt2_xl``,
    ``transformer``).

    ``batch``, ``seq`` and ``hidden`` are integers in [1, :data:`MAX_DIMENSION`], ``layers`` in
    [1, :data:`MAX_LAYERS`]; BERT-large and GPT-2 XL take sequences up to their position
    embeddings (:data:`POSITIONS`).

    Raises
    ------
    ValueError
        For an unknown model, or a sequence length for a CNN.
    ModelInputError
        (a ValueError) For a size outside its range.
    """
    key = name.lower().replace("-", "_")
    if key == "bert":
        key = "bert_large"
    builders = dict(MODELS, transformer=transformer)
    if key not in builders:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(sorted(builders))}")
    if batch is not None:
        kwargs["batch"] = batch
    if "seq" in kwargs and key in ("resnet50", "vgg16"):
        raise ValueError(f"{key} has no sequence length")
    if "seq" in kwargs and key in POSITIONS:
        check_count("seq", kwargs["seq"], 1, POSITIONS[key],
                    f"{key} has {POSITIONS[key]} position embeddings")
    for param, unit in (("batch", "samples per GPU"), ("seq", "tokens"), ("hidden", "features")):
        if param in kwargs:
            check_count(param, kwargs[param], 1, MAX_DIMENSION, unit)
    if "layers" in kwargs:
        check_count("layers", kwargs["layers"], 1, MAX_LAYERS,
                    "each is simulated; 100 times the deepest published transformers")
    return builders[key](**kwargs)
