"""``translation_draft_head``: training the ``draft_head`` drafter on a frozen verifier.

The verifier (``--verifier-path``, a checkpoint of a ``transformer`` trained on the same
dictionaries) is loaded once and never trained; each batch runs it once without gradients (with
``--keep-verifier-states`` only the first epoch's batches do: ``verifier_memory``) and the head
learns to predict, after every prefix of every target, the next ``--block-size`` tokens. Train on
the verifier's own greedy outputs (self-distillation: ``scripts/distill.sh ... --beam 1``) for
drafts that the verifier accepts; references work too. Checkpoints keep the dictionaries and a
fingerprint of the verifier, so decoding refuses a head trained for another verifier.
"""
import os
from dataclasses import dataclass, field

from fairseq import checkpoint_utils
from fairseq import models as fairseq_models
from fairseq.tasks import register_task

from pardec_fairseq.models.draft_head import DraftHeadModel, verifier_fingerprint
from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask
from pardec_fairseq.tasks.verifier_memory import VerifierMemory


@dataclass
class TranslationDraftHeadConfig(TranslationPardecConfig):
    verifier_path: str = field(
        default="", metadata={"help": "checkpoint of the verifier the head drafts for (frozen while training)"})
    block_size: int = field(default=4, metadata={"help": "tokens the head drafts per call (its mask slots)"})
    keep_verifier_states: bool = field(default=False, metadata={
        "help": "keep the frozen verifier's encoder output and decoder states of each training sentence in memory "
                "after its first batch, so that later epochs run the head alone (the verifier's forward was 42% of a "
                "step on a 2-core CPU); costs (source + target tokens) x model width x 4 bytes"})


@register_task("translation_draft_head", dataclass=TranslationDraftHeadConfig)
class TranslationDraftHeadTask(TranslationPardecTask):
    cfg: TranslationDraftHeadConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.verifier = None
        self.memory = self.memory_of = None

    def load_verifier(self):
        path = self.cfg.verifier_path
        if not path:
            raise ValueError("--task translation_draft_head trains a head for a verifier: pass the verifier's "
                             "checkpoint with --verifier-path")
        if not os.path.isfile(path):
            raise ValueError(f"--verifier-path {path}: no such checkpoint file")
        state = checkpoint_utils.load_checkpoint_to_cpu(path)
        verifier = fairseq_models.build_model(state["cfg"].model, self)
        verifier.load_state_dict(state["model"], strict=True, model_cfg=state["cfg"].model)
        for name, dictionary, embedding in (("source", self.source_dictionary, verifier.encoder.embed_tokens),
                                            ("target", self.target_dictionary, verifier.decoder.embed_tokens)):
            if embedding.num_embeddings != len(dictionary):
                raise ValueError(f"--verifier-path {path} embeds {embedding.num_embeddings} {name} symbols but the "
                                 f"data's {name} dictionary has {len(dictionary)}: binarize the head's data with the "
                                 "verifier's dictionaries (fairseq-preprocess --srcdict/--tgtdict)")
        return verifier.requires_grad_(False)

    def build_model(self, cfg, from_checkpoint=False):
        if self.verifier is None:
            self.verifier = self.load_verifier()
        if not 1 <= self.cfg.block_size <= 64:
            raise ValueError(f"--block-size {self.cfg.block_size}: give 1 to 64 drafted tokens per call")
        model = super().build_model(cfg, from_checkpoint)
        if not isinstance(model, DraftHeadModel):
            raise ValueError(f"--task translation_draft_head trains the draft head: use --arch draft_head "
                             f"(got a {type(model).__name__})")
        return model

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        # a distributed worker short of batches trains on fairseq's dummy batch with ``ignore_grad``; its
        # sentences may be another split's (seen: the valid set's), so it runs the verifier
        if self.cfg.keep_verifier_states and not ignore_grad:
            net_input = sample["net_input"]
            net_input["verifier_outputs"] = self.verifier_memory(model.input_layers).outputs(
                sample["id"], net_input["src_tokens"], net_input["prev_output_tokens"],
                lambda: model.verifier_outputs(net_input["src_tokens"], net_input["src_lengths"],
                                               net_input["prev_output_tokens"]))
        return super().train_step(sample, model, criterion, optimizer, update_num, ignore_grad)

    def verifier_memory(self, input_layers: int) -> VerifierMemory:
        """The training set's ``VerifierMemory``, made at its first training step (again where an epoch loads
        another training set: a sentence's id is its index in the epoch's set), for a head that reads the
        verifier's first ``input_layers`` decoder layers' output."""
        dataset = self.dataset(self.cfg.train_subset)
        if self.memory is None or self.memory_of is not dataset:
            if getattr(dataset, "src_sizes", None) is None or getattr(dataset, "tgt_sizes", None) is None:
                raise ValueError("--keep-verifier-states needs a training set of source and target sentences "
                                 "(fairseq's LanguagePairDataset)")
            self.memory = VerifierMemory(dataset.src_sizes, dataset.tgt_sizes,
                                         self.verifier.encoder.embed_tokens.embedding_dim,
                                         self.verifier.decoder.output_embed_dim, self.source_dictionary.pad(),
                                         self.target_dictionary.pad(), "--keep-verifier-states",
                                         self.verifier.decoder.embed_dim if input_layers else 0)
            self.memory_of = dataset
        return self.memory

    def state_dict(self):
        """Checkpoints keep the dictionaries and the verifier's fingerprint."""
        return {**super().state_dict(), "source_symbols": list(self.source_dictionary.symbols),
                "target_symbols": list(self.target_dictionary.symbols),
                "verifier_fingerprint": verifier_fingerprint(self.verifier)}
