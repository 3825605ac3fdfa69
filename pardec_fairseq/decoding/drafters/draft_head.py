"""The ``draft_head`` drafter: the next ``k`` tokens from the verifier's own states.

The head's layers are laid out as the fast verifier's decoder layers (``DecoderLayer``): the slots'
self-attention reads the keys and values of the verifier's decoder states of the accepted output
from a buffer per layer (each state projected once, in the pass that computed it, written at the
row's own columns as the verifier's cache is) and the slots' own, all slots seeing each other; the
encoder attention reads keys and values of the verifier's encoder states (once per batch). So a
proposal is one pass of the fast path's layers (on a CPU one compiled call) over ``k`` slots: no
encoder, no re-run over the prefix; the draft is each slot's top-1 or, with a refinement, chosen
from the slots' top-k lattice as bpd's heads' drafts are. With ``steps`` above 1 a proposal is that
many calls, each going on from the last one's last slot (its token, and its output features in place
of the verifier's state, whose keys and values the next call reads where the verifier's will be): a
head trained with ``--block-size 1`` and ``--state-regression-weight`` drafts autoregressively, as
EAGLE's drafter does; with ``branches`` above 1 its calls grow a tree instead, a level per call
(EAGLE-2's dynamic tree: ``draft_tree``), or with ``leaves`` its chain's likeliest tokens and runner-up
words are verified as a tree at no cost in calls. The head only changes speed: exact acceptance keeps
the verifier's greedy output whatever it drafts.
"""
import math
from typing import Optional

import torch
import torch.nn.functional as F

from pardec_fairseq.decoding import vector_kernels
from pardec_fairseq.decoding.compiled_layers import CompiledLayers, DecoderInputs, Layers, compiles
from pardec_fairseq.decoding.drafters import Drafter, draft_projection
from pardec_fairseq.decoding.drafters.chain_length import ChainLength
from pardec_fairseq.decoding.drafters.checkpoints import check_dictionaries
from pardec_fairseq.decoding.drafters.compiled_head import AcceptedStates, CompiledHead
from pardec_fairseq.decoding.drafters.refinement import Lattice
from pardec_fairseq.decoding.drafters.self_draft import fast_cache_of, self_draft_obstacle
from pardec_fairseq.decoding.drafters.shortlist import LexicalShortlist, ShortlistProjection, nothing_to_add
from pardec_fairseq.decoding.fast_ops import Norm, Product
from pardec_fairseq.decoding.fast_layers import AmongNew, DecoderLayer, EncoderKeysValues, FastCache, run_layers
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.draft_head import (DraftHead, DraftHeadModel, HeadLayer, draft_head_architecture,
                                              has_fairseq_output_layer, same_fingerprint, token_input_width,
                                              verifier_fingerprint)


def relaid(layer: HeadLayer, precision: str = "float32") -> DecoderLayer:
    """A head layer as the fast path's decoder layer (pre-norm, relu, the slots' q/k/v in one product),
    its products in ``precision`` on a CPU."""
    scale = (layer.q.out_features // layer.heads) ** -0.5

    def product(*linears, scale_first=1.0):
        return Product.of(*linears, scale_first=scale_first, precision=precision)
    encoder = (product(layer.enc_q, scale_first=scale), product(layer.enc_kv), product(layer.enc_out),
               Norm(layer.enc_norm, True))
    return DecoderLayer(layer.heads, product(layer.q, layer.slot_kv, scale_first=scale), product(layer.self_out),
                        Norm(layer.self_norm, True), product(layer.fc1), product(layer.fc2), F.relu,
                        Norm(layer.ffn_norm, True), encoder)


class VerifierInputLayers:
    """The verifier's first decoder layers, through which a head trained with ``--head-input-layers`` reads
    each token it drafts after, run by the compiled drafting call (``compiled_head._read_tokens``) over the
    verifier's own cache, their products in the head's precision."""

    def __init__(self, decoder, count: int, precision: str):
        obstacle = self_draft_obstacle(decoder)
        if obstacle is not None:
            raise ValueError(f"the draft head reads tokens through the verifier's first {count} decoder layers "
                             f"(--head-input-layers), run as fairseq's transformer decoder runs them; this one has "
                             f"{obstacle}: train a head with --head-input-layers 0")
        with torch.no_grad():
            layers = Layers([DecoderLayer.of(layer, precision) for layer in decoder.layers[:count]])
        self.count, self.inputs = count, DecoderInputs(decoder)
        self.weights = CompiledLayers(layers).weights if compiles(layers) else None

    def operands(self, cache: FastCache, reach: int):
        """What ``_read_tokens`` reads, the cache grown to ``reach`` columns: the verifier's whole cache, of
        whose layers the first ``count`` run (as many as the weights hold)."""
        cache.reserve(reach)
        return self.inputs.operands, cache.numpy_views(), self.weights


def default_steps(block_size: int, refined: bool) -> int:
    """Calls per proposal when ``--draft-head-steps`` is not given: a one-slot head (trained to draft
    autoregressively) drafts three tokens (its chains: ``chain_steps`` by batch), a block head its
    block; a refinement chooses among one call's lattice."""
    return 3 if block_size == 1 and not refined else 1


# the most calls a one-slot head's chain without leaves takes by default in a batch of one sentence
# (``ChainLength``)
MOST_CHAIN_STEPS = 16


def chain_steps(rows: int, leaves: int, device: torch.device, chain_length: ChainLength) -> int:
    """Calls per proposal of a one-slot head's chain in a batch of ``rows`` sentences with ``leaves``
    runner-ups when ``--draft-head-steps`` is not given. On a CPU a sentence's chain without leaves (as
    `gad++`'s, whose relaxed rule takes no trees) drafts as many as ``chain_length`` learns pay for; else as
    many as keep a pass's tokens (each sentence's last one, its drafted ones and leaves) within one tile of
    the vector kernel (``WIDEST_TILE``: a pass that wide reads each weight once, a wider one pays its drafted
    rows in arithmetic), at least one (and the leaves): a sentence with a leaf 4 under AVX-512, 3 under
    AVX2; two sentences 2 under AVX-512; more, one. On the Zen 3 VM (LibreOffice, all 1,120 test sentences,
    a head reading the verifier's first two layers, 2026-12-02) the learnt chains ran `gad++` (beta 3, tau 1)
    1.85x plugin greedy against 4 calls' 1.62x in one run, but exact `gad`'s chains with a leaf 1.30-1.36x
    against 3 calls' 1.36-1.40x in two; on the Intel Xeon VM (the recipe's half-hour head, 2026-11-29) at
    batch 2 two calls ran 1.22x plugin greedy against 1.13x, 1.20x and 1.19x for 1, 3 and 4, at batch 4 one
    call 1.05x against 3 calls' 1.01x, at batch 16 0.93-0.98x against 0.81-0.89x (4 calls: 0.67x).
    Elsewhere (a GPU) 3."""
    if device.type != "cpu":
        return default_steps(1, False)
    if rows == 1 and leaves == 0:
        return chain_length.steps()
    return max(1, leaves, vector_kernels.WIDEST_TILE // rows - 1 - leaves)


def likeliest_nodes(tokens, parents, path_log_probs, counts, nodes: int):
    """A draft tree ``[rows, m]`` (words, parents' pass positions, paths' log-probabilities; node
    counts) cut to each row's ``nodes`` likeliest nodes (EAGLE-2's reranking), in their order: a path
    is no likelier than its parent's, which comes first among equals, so every kept node's parent is
    kept. Returns the words, parents' pass positions and counts."""
    rows, m = tokens.shape
    if m <= nodes:
        return tokens, parents, counts
    positions = torch.arange(m, device=tokens.device)
    ranked = path_log_probs.masked_fill(positions >= counts.unsqueeze(1), -math.inf)
    order = ranked.sort(dim=1, descending=True, stable=True).indices[:, :nodes].sort(dim=1).values
    kept = counts.clamp(max=nodes)
    # a node's new pass position, by its old one (position 0, the last accepted token, stays)
    renumbered = torch.zeros(rows, m + 1, dtype=torch.long, device=tokens.device)
    renumbered.scatter_(1, order + 1, positions[:nodes].expand(rows, -1) + 1)
    return tokens.gather(1, order), renumbered.gather(1, parents.gather(1, order)), kept


def likeliest_of_comb(words, paths, nodes: int):
    """``compiled_head._likeliest_of_comb`` in torch: of a one-slot chain's comb ``words`` ``[rows, 2 *
    steps]`` (step ``s``'s token at ``2 s``, its runner-up at ``2 s + 1``) with their paths'
    log-probabilities ``paths``, each row's ``nodes`` likeliest (a parent first among equals), the chain's
    kept tokens first, then the kept runner-ups by step; their words and parents' pass positions."""
    candidates = words.size(1)
    kept = torch.zeros_like(words, dtype=torch.bool)
    kept.scatter_(1, paths.sort(dim=1, descending=True, stable=True).indices[:, :nodes], True)
    candidate = torch.arange(candidates, device=words.device)
    pass_order = (candidate % 2) * candidates + candidate  # the chain's tokens, then the runner-ups, by step
    order = torch.where(kept, pass_order, 2 * candidates).sort(dim=1).indices[:, :nodes]
    return words.gather(1, order), order // 2


def trained_draft_vocab(state) -> int:
    """The ``--draft-vocab`` a draft head's checkpoint ``state`` was trained with (0: all words)."""
    return getattr(state["cfg"].task, "draft_vocab", None) or 0


class DraftHeadDrafter(Drafter):
    def __init__(self, model: DraftHeadModel, refinement=None, draft_vocab: int = 0, precision: str = "float32",
                 steps: Optional[int] = None, branches: int = 1, least_probability: float = 0.0, nodes: int = 0,
                 leaves: Optional[int] = None, shortlist: Optional[LexicalShortlist] = None):
        """Drafts with ``model``'s head re-laid (the model is left as it is); ``refinement``: a
        ``LatticeRescoring`` or ``LocalNeuralRescoring`` choosing the draft from the slots' top-k
        lattice (``None``: each slot's top-1); ``draft_vocab``: the slots draft among the dictionary's
        first ``draft_vocab`` words (0: all); ``precision``: that of the head's products on a CPU;
        ``steps``: calls of the head per proposal (``None``: ``default_steps``, a one-slot head's chain
        ``chain_steps`` by batch); ``branches``,
        ``least_probability``: a one-slot head's draft tree keeps per level the ``branches`` likeliest
        paths at least that likely (``draft_tree``; 1 and 0: a chain of ``steps`` tokens), of which
        the ``nodes`` likeliest are verified (0: all); ``leaves``: a one-slot head's chain also offers each
        call's runner-up word, and the ``steps + leaves`` likeliest of its tokens and runner-ups (by the
        head's probability of their path) are verified as a tree (a rejected token's runner-up is often the
        verifier's choice: kept, it and the verifier's next token join the output; a likely runner-up may
        take the place of the chain's last token); ``None``: one for a one-slot head's chain, in batches of
        one sentence where the generator scores trees (``allow_trees``): there a pass of a few more tokens
        costs what it does without them;
        ``shortlist``: each batch also drafts among the words beyond the first ``draft_vocab`` its
        sources call for (``LexicalShortlist``, built for ``draft_vocab`` first words)."""
        head, self.verifier = model.head, model.verifier
        self.steps = default_steps(head.block_size, refinement is not None) if steps is None else steps
        if self.steps < 1:
            raise ValueError(f"--draft-head-steps {self.steps}: a proposal takes one call of the head or more")
        if refinement is not None and self.steps > 1:
            raise ValueError("--refine chooses among the top-k of one call's slots: use it with --draft-head-steps 1")
        if branches < 1 or not 0.0 <= least_probability < 1.0 or nodes < 0:
            raise ValueError(f"--draft-head-branches {branches}, --draft-head-threshold {least_probability}, "
                             f"--draft-head-nodes {nodes}: a draft tree keeps one branch per level or more, paths of "
                             "probability in [0, 1), 0 (all) nodes or more")
        self.grows_tree = branches > 1 or least_probability > 0 or nodes > 0
        if self.grows_tree and (head.block_size > 1 or refinement is not None):
            raise ValueError("--draft-head-branches, --draft-head-threshold and --draft-head-nodes grow a tree a token "
                             "per call: they need a head trained with --block-size 1 and no --refine")
        # a one-slot head's chain takes its calls by batch (``chain_steps``), self.steps the most of them
        self.auto_steps = steps is None and head.block_size == 1 and refinement is None and not self.grows_tree
        if self.auto_steps:
            self.steps = MOST_CHAIN_STEPS
        self.chain_length = ChainLength(self.steps)
        words = draft_vocab or len(self.verifier.decoder.dictionary)  # draft_projection checks draft_vocab
        self.auto_leaves = leaves is None
        if leaves is None:
            leaves = 1 if head.block_size == 1 and refinement is None and not self.grows_tree and words > 1 else 0
        if not 0 <= leaves <= self.steps or (leaves and (head.block_size > 1 or refinement is not None
                                                          or self.grows_tree)):
            raise ValueError(f"--draft-head-leaves {leaves}: runner-up leaves go beside the tokens of a chain drafted "
                             f"a token per call ({self.steps} here): at most that many, with a head trained with "
                             "--block-size 1, no --refine and no --draft-head-branches, --draft-head-threshold or "
                             "--draft-head-nodes")
        self.refinement, self.branches, self.nodes, self.leaves = refinement, branches, nodes, leaves
        self.least_probability = least_probability
        # leaves chosen by default are left out where trees are not scored, asked-for ones are refused there
        self.drafts_trees = (refinement is not None and refinement.drafts > 1) or branches > 1 or \
            (leaves > 0 and not self.auto_leaves)
        self.trees_allowed = True
        self.block_size, self.final_norm = head.block_size, head.final_norm
        with torch.no_grad():
            self.layers = [relaid(layer, precision) for layer in head.layers]
            self.encoder_keys_values = EncoderKeysValues(self.layers)
            self.memory = [Product.of(layer.memory_kv, precision=precision) for layer in head.layers]
            self.fuse, self.slot_embedding = Product.of(head.fuse, precision=precision), head.slot_embedding.detach()
            decoder = self.verifier.decoder
            self.output_layer = draft_projection(decoder, draft_vocab, refinement, precision) \
                if has_fairseq_output_layer(decoder, draft_vocab) else decoder.output_layer
            self.shortlist = shortlist
            if shortlist is not None:
                if not draft_vocab:
                    raise ValueError(nothing_to_add(draft_vocab))
                if (shortlist.first_words, shortlist.target_words) != (draft_vocab, len(decoder.dictionary)):
                    raise ValueError(f"a shortlist beyond the first {shortlist.first_words} of "
                                     f"{shortlist.target_words} words, for a head drafting among the first "
                                     f"{draft_vocab} of {len(decoder.dictionary)}: build it for the head's")
                self.output_layer = ShortlistProjection(decoder.output_projection, draft_vocab, precision)
        if branches > words or (leaves and words < 2):
            raise ValueError(f"--draft-head-branches {branches}, --draft-head-leaves {leaves}: the head drafts among "
                             f"{words} words; branch at most that many ways (a leaf is a second word)")
        layers = Layers(self.layers)
        self.compiled = CompiledLayers(layers) if compiles(layers) else None
        input_layers = VerifierInputLayers(self.verifier.decoder, model.input_layers, precision) \
            if model.input_layers else None
        # the whole drafting call compiled, where the draft is each slot's top-1 on the vector kernel
        self.compiled_head = None
        if self.compiled is not None and isinstance(self.output_layer, (Product, ShortlistProjection)) \
                and self.output_layer.on_kernel and (input_layers is None or input_layers.weights is not None):
            self.compiled_head = CompiledHead(self.compiled, self.verifier.decoder.embed_tokens.weight, self.fuse,
                                              self.slot_embedding, self.final_norm, self.output_layer, self.memory,
                                              input_layers)
        if input_layers is not None and (self.compiled_head is None or self.grows_tree or refinement is not None):
            raise ValueError(f"this draft head reads tokens through the verifier's first {model.input_layers} decoder "
                             "layers (trained with --head-input-layers), which only its compiled chain runs: decode in "
                             "float32 on a CPU without --refine, --draft-head-branches, --draft-head-threshold and "
                             "--draft-head-nodes, or train a head with --head-input-layers 0")

    @classmethod
    def from_state(cls, path, state, src_dict, tgt_dict, verifier, refinement=None, draft_vocab=None,
                   precision: str = "float32", steps: Optional[int] = None, branches: int = 1,
                   least_probability: float = 0.0, nodes: int = 0, leaves: Optional[int] = None,
                   shortlist: Optional[LexicalShortlist] = None):
        """``draft_vocab``: ``None`` for the words the head was trained to draft among
        (``trained_draft_vocab``)."""
        saved = state.get("task_state", {})
        check_dictionaries(path, saved, src_dict, tgt_dict)
        if not same_fingerprint(saved.get("verifier_fingerprint", []), verifier_fingerprint(verifier)):
            raise ValueError(f"--drafter-path {path} is a draft head trained for another verifier than the model "
                             "decoding here (its weights differ): train a head with --verifier-path set to this "
                             "checkpoint")
        args = state["cfg"].model
        # heads saved before --head-input-layers read the embedding
        args.head_input_layers = getattr(args, "head_input_layers", 0)
        draft_head_architecture(args)  # defaults for options added since the head was saved
        decoder = verifier.decoder
        head = DraftHead(args, state["cfg"].task.block_size, token_input_width(decoder, args.head_input_layers),
                         decoder.output_embed_dim, verifier.encoder.embed_tokens.embedding_dim)
        model = DraftHeadModel(head, verifier, input_layers=args.head_input_layers)
        model.load_state_dict(state["model"], strict=True, model_cfg=args)
        parameter = next(verifier.parameters())
        if draft_vocab is None:
            draft_vocab = trained_draft_vocab(state)
        return cls(model.to(device=parameter.device, dtype=parameter.dtype).eval(), refinement, draft_vocab, precision,
                   steps, branches, least_probability, nodes, leaves, shortlist)

    def begin(self, net_input, max_len, encoded=None, verifier_cache=None):
        if encoded is None or encoded[0] is None:
            raise ValueError("the draft head reads the verifier's encoder states: decode an encoder-decoder model "
                             "through the plugin's engine")
        if self.compiled_head is not None:  # whichever verifier runs, the head's products follow torch's threads
            vector_kernels.follow_torch_threads()
        self.verifier_cache = fast_cache_of(verifier_cache, "this draft head reads tokens through the verifier's "
                                            "first layers (--head-input-layers)") \
            if self.compiled_head is not None and self.compiled_head.input_layers is not None else None
        enc, padding = encoded
        rows, k, first = enc.size(0), self.block_size, self.layers[0]
        # a pass writes up to steps * k + 1 states, and a proposal as many slots, from columns <= max_len
        buffers = enc.new_zeros(len(self.layers), 2, rows, first.heads, max_len + self.steps * k + 2, first.head_dim)
        enc_mask = None if padding is None else padding.view(rows, 1, 1, -1)
        self.cache = FastCache(buffers, self.encoder_keys_values(enc), enc_mask, enc, padding)
        if self.shortlist is not None:
            self.output_layer.select(self.shortlist.words(net_input["src_tokens"]))
        self.last_state = enc.new_zeros(rows, self.slot_embedding.size(1))
        self.accepted: Optional[AcceptedStates] = None  # the last pass's states, remembered by the next proposal
        self.all_slots = AmongNew(torch.ones(rows, k, k, dtype=torch.bool, device=enc.device))
        self.batch_leaves = self.leaves if not self.auto_leaves or (self.trees_allowed and rows == 1) else 0
        self.batch_steps = chain_steps(rows, self.batch_leaves, enc.device, self.chain_length) \
            if self.auto_steps else self.steps
        # a sentence's chain without leaves on a CPU tells the chain's length how much of it the verifier keeps
        self.learns_chain_length = self.auto_steps and rows == 1 and not self.batch_leaves and \
            enc.device.type == "cpu"

    def propose(self, state) -> Proposal:
        accepted, self.accepted = self.accepted, None
        if self.compiled_head is not None and not self.grows_tree and self.refinement is None:
            tokens, counts, parents, tree = self.compiled_head.draft(
                self.cache, state.tokens, self.last_state, state.lengths, self.all_slots.sees, self.batch_steps,
                self.batch_leaves, accepted, self.verifier_cache)
            return Proposal(tokens=tokens, lengths=counts, parents=parents, tree=tree)
        if accepted is not None:
            self.compiled_head.remember(self.cache, accepted, self.last_state)
        last_tokens = state.last_tokens().view(-1)
        if self.refinement is not None:
            logits = self.output_layer(self.slot_features(last_tokens, self.last_state, state.lengths))
            return self.refinement.propose(Lattice.of(logits, self.refinement.top_k), state)
        if self.grows_tree:
            if self.compiled_head is not None:
                tokens, parents, counts = self.compiled_head.draft_tree(
                    self.cache, last_tokens, self.last_state, state.lengths, self.steps, self.branches,
                    self.least_probability, self.nodes)
            else:
                tree = self.draft_tree(last_tokens, state.lengths)
                tokens, parents, counts = likeliest_nodes(*tree, self.nodes) if self.nodes else \
                    (tree[0], tree[1], tree[3])
            width = int(counts.max())
            # one branch per level is a chain, as long as its path stays likely enough
            return Proposal(tokens=tokens[:, :width], lengths=counts,
                            parents=parents[:, :width] if self.branches > 1 and width > 0 else None)
        tokens, parents = self._draft(last_tokens, state.lengths)
        return Proposal(tokens=tokens, lengths=torch.full_like(state.lengths, tokens.size(1)), parents=parents)

    def allow_trees(self, allowed: bool):
        self.trees_allowed = allowed

    def _draft(self, last_tokens, lengths):
        """``CompiledHead.draft`` through torch: each of the batch's calls going on from the last, the chain's
        tokens ``[rows, steps * k]`` and ``None``, or with leaves the likeliest of them and the calls'
        runner-ups and their parents' pass positions ``[rows, steps + leaves]`` (``likeliest_of_comb``)."""
        last_state, drafted, comb_words, comb_paths = self.last_state, [], [], []
        chain_path = self.last_state.new_zeros(last_tokens.size(0))  # the log-probability of the chain so far
        for step in range(self.batch_steps):
            features = self.slot_features(last_tokens, last_state, lengths)
            logits = self.output_layer(features)
            drafted.append(logits.argmax(-1))
            if self.batch_leaves:  # the best word but the top-1, the first of equals (topk's order may differ)
                best = F.one_hot(drafted[-1], logits.size(-1)).bool()
                pair = torch.cat([drafted[-1], logits.masked_fill(best, -math.inf).argmax(-1)], 1)
                pair_log_probs = F.log_softmax(logits[:, 0].float(), -1).gather(1, pair)
                comb_words.append(pair)
                comb_paths.append(chain_path.unsqueeze(1) + pair_log_probs)
                chain_path = comb_paths[-1][:, 0]
            if step + 1 < self.batch_steps:
                self._remember(features, lengths)
                last_tokens, last_state, lengths = drafted[-1][:, -1], features[:, -1], lengths + self.block_size
        if not self.batch_leaves:
            return torch.cat(drafted, 1), None
        nodes = self.batch_steps + self.batch_leaves
        return likeliest_of_comb(torch.cat(comb_words, 1), torch.cat(comb_paths, 1), nodes)

    def draft_tree(self, last_tokens, lengths):
        """``CompiledHead.draft_tree`` through torch (``compiled_head._draft_tree`` says what it drafts):
        the nodes' words, parents' pass positions and paths' log-probabilities ``[rows, steps *
        branches]``, the node counts."""
        rows, device = last_tokens.size(0), last_tokens.device
        branches, capacity = self.branches, self.steps * self.branches
        positions = torch.arange(capacity + 2, device=device)
        # by pass position, a last one where nodes not kept go: word, parent's position, path
        # log-probability, the positions it sees (itself, its ancestors), output features
        words = torch.zeros(rows, capacity + 2, dtype=torch.long, device=device)
        words[:, 0] = last_tokens
        parents = torch.zeros_like(words)
        path_log_probs = torch.zeros(rows, capacity + 2, device=device)
        ancestors = torch.eye(capacity + 2, dtype=torch.bool, device=device).repeat(rows, 1, 1)
        features = self.last_state.new_zeros(rows, capacity + 2, self.last_state.size(1))
        counts = torch.zeros(rows, dtype=torch.long, device=device)
        level_first, level_count = torch.zeros_like(counts), torch.ones_like(counts)
        least = math.log(self.least_probability) if self.least_probability > 0 else -math.inf
        for step in range(self.steps):
            n = int(level_count.max())
            if n == 0:
                break
            seen = int(level_first.max()) + n
            level = level_first.unsqueeze(1) + positions[:n]  # [rows, n] the level's pass positions
            real = positions[:n] < level_count.unsqueeze(1)
            level = torch.where(real, level, capacity + 1)
            parent_features = features.gather(1, parents.gather(1, level).unsqueeze(2).expand(-1, -1, features.size(2)))
            states = torch.where((level == 0).unsqueeze(2), self.last_state.unsqueeze(1), parent_features)
            embedding = self.verifier.decoder.embed_tokens(words.gather(1, level))
            inputs = torch.cat([embedding, states], -1).masked_fill(~real.unsqueeze(2), 0.0)  # filler: zeros
            x = self.fuse(inputs) + self.slot_embedding[0]
            # the last ``seen`` columns' pass positions; a filler node sees the output and itself
            span = (level_first + n - seen).unsqueeze(1) + positions[:seen]
            sees = ancestors.gather(1, level.unsqueeze(2).expand(-1, -1, capacity + 2))
            sees = sees.gather(2, span.clamp(min=0).unsqueeze(1).expand(-1, n, -1))
            filler_sees = span.unsqueeze(1) == (level_first.unsqueeze(1) + positions[:n]).unsqueeze(2)
            sees = (span < 0).unsqueeze(1) | torch.where(real.unsqueeze(2), sees, filler_sees)
            x = run_layers(self.layers, self.compiled, self.cache, x, lengths + level_first, AmongNew(sees))
            out = F.layer_norm(x, self.final_norm.normalized_shape, self.final_norm.weight, self.final_norm.bias,
                               self.final_norm.eps)
            features.scatter_(1, level.unsqueeze(2).expand_as(out), out)
            best = F.log_softmax(self.output_layer(out).float(), -1).topk(branches, -1)
            candidates = path_log_probs.gather(1, level).unsqueeze(2) + best.values
            candidates = candidates.masked_fill(~real.unsqueeze(2), -math.inf).view(rows, -1)
            chosen = candidates.topk(branches, -1)
            kept = (chosen.values >= least) & (chosen.values > -math.inf)
            node = torch.where(kept, counts.unsqueeze(1) + 1 + positions[:branches], capacity + 1)
            parent = level.gather(1, chosen.indices // branches)
            words.scatter_(1, node, best.indices.view(rows, -1).gather(1, chosen.indices))
            parents.scatter_(1, node, parent)
            path_log_probs.scatter_(1, node, chosen.values)
            inherited = ancestors.gather(1, parent.unsqueeze(2).expand(-1, -1, capacity + 2)) \
                | (positions.view(1, 1, -1) == node.unsqueeze(2))
            ancestors.scatter_(1, node.unsqueeze(2).expand_as(inherited), inherited)
            if step + 1 < self.steps:
                self._remember(out, lengths + level_first)
            level_first, level_count = counts + 1, kept.sum(1)
            counts = counts + level_count
        return words[:, 1:capacity + 1], parents[:, 1:capacity + 1], path_log_probs[:, 1:capacity + 1], counts

    def slot_features(self, last_tokens, last_state, first):
        """``[rows, k, d]``: the head's output for the ``k`` tokens after each row's ``last_tokens``
        ``[rows]`` at column ``first[r]``, after the state ``last_state`` ``[rows, d]``."""
        embedding = self.verifier.decoder.embed_tokens(last_tokens)
        x = self.fuse(torch.cat([embedding, last_state], -1)).unsqueeze(1) + self.slot_embedding
        x = run_layers(self.layers, self.compiled, self.cache, x, first, self.all_slots)
        return F.layer_norm(x, self.final_norm.normalized_shape, self.final_norm.weight, self.final_norm.bias,
                            self.final_norm.eps)

    def update(self, scores, verdict, state):
        """Keep the states of the tokens the pass accepted (the pass's first token and the accepted
        draft), at the row's next columns: compiled, in the next proposal's call (``AcceptedStates``; a
        tree's path gathered there), so a sentence's last pass writes nothing."""
        if self.learns_chain_length:
            self.chain_length.observe(verdict.accepted.numpy(), self.batch_steps)
        states = scores.hidden_states(0)
        if self.compiled_head is not None:
            self.accepted = AcceptedStates.of(states, verdict.path, state.lengths, verdict.accepted)
            return
        if verdict.path is not None:
            states = states.gather(1, verdict.path.unsqueeze(2).expand(-1, -1, states.size(2)))
        self._remember(states, state.lengths)
        self.last_state = states.gather(1, verdict.accepted.view(-1, 1, 1).expand(-1, 1, states.size(2))).squeeze(1)

    def _remember(self, states, lengths):
        """The keys and values of ``states`` ``[rows, m, d]`` into the buffers at columns ``lengths[r]`` on."""
        rows, m, _ = states.shape
        first = self.layers[0]
        self.cache.reserve(int(lengths.max()) + m)
        index = (lengths.unsqueeze(1) + torch.arange(m, device=states.device)).view(rows, 1, m, 1)
        index = index.expand(rows, first.heads, m, first.head_dim)
        for i, memory in enumerate(self.memory):
            keys_values = memory(states).view(rows, m, 2, first.heads, first.head_dim).permute(2, 0, 3, 1, 4)
            self.cache.buffers[i, 0].scatter_(2, index, keys_values[0])
            self.cache.buffers[i, 1].scatter_(2, index, keys_values[1])

    def keep_rows(self, rows):
        if self.accepted is not None:
            self.accepted = self.accepted.keep_rows(rows.cpu().numpy())
        self.cache.keep_rows(rows)
        self.last_state = self.last_state[rows]
        self.all_slots = AmongNew(self.all_slots.sees[rows])
