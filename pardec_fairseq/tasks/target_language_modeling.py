"""``target_language_modeling``: fairseq's language modeling on the target side of a translation
data folder, for the rescoring language model of ``bpd --refine neural`` (Kim et al. 2024).

Each sample is one target sentence read after EOS, as the translation decoder reads its output, in
the translation model's target dictionary (``DATA/dict.TGT.txt``), so the model's token ids and the
context it learns from are the verifier's. fairseq's own ``language_modeling`` would need the split
renamed and, for one sentence per sample (``--sample-break-mode eos``), a numpy older than 2.0.
"""
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from fairseq.data import BaseWrapperDataset, Dictionary, MonolingualDataset, data_utils
from fairseq.tasks import register_task
from fairseq.tasks.language_modeling import LanguageModelingConfig, LanguageModelingTask


@dataclass
class TargetLanguageModelingConfig(LanguageModelingConfig):
    source_lang: Optional[str] = field(
        default=None, metadata={"help": "source language of the translation splits", "argparse_alias": "-s"})
    target_lang: Optional[str] = field(
        default=None, metadata={"help": "target language: its side is modelled", "argparse_alias": "-t"})


class SentencesAfterEos(BaseWrapperDataset):
    """Sentences (ending with EOS) as ``MonolingualDataset`` reads blocks: the input (EOS, then the
    sentence without its EOS), the next-token targets (the sentence) and the targets two back."""

    def __init__(self, dataset, eos):
        super().__init__(dataset)
        self.eos = eos

    def __getitem__(self, index):
        sentence = self.dataset[index]
        eos = sentence.new([self.eos])
        return torch.cat([eos, sentence[:-1]]), sentence, torch.cat([eos, eos, sentence[:-2]])[:sentence.numel()]


@register_task("target_language_modeling", dataclass=TargetLanguageModelingConfig)
class TargetLanguageModelingTask(LanguageModelingTask):
    @classmethod
    def setup_dictionary(cls, args, **kwargs):
        if not (args.source_lang and args.target_lang):
            raise ValueError("--task target_language_modeling models the target side of a translation data folder: "
                             "pass its languages with -s SRC -t TGT")
        dictionary = Dictionary.load(os.path.join(args.data.split(os.pathsep)[0], f"dict.{args.target_lang}.txt"))
        return dictionary, dictionary

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        paths = self.args.data.split(os.pathsep)
        src, tgt = self.args.source_lang, self.args.target_lang
        prefix = os.path.join(paths[(epoch - 1) % len(paths)], f"{split}.{src}-{tgt}.{tgt}")
        sentences = data_utils.load_indexed_dataset(prefix, self.dictionary, self.args.dataset_impl, combine=combine)
        if sentences is None:
            raise FileNotFoundError(f"no target side of split {split} at {prefix}.bin/.idx")
        dataset = SentencesAfterEos(sentences, self.dictionary.eos())
        self.datasets[split] = MonolingualDataset(dataset, sentences.sizes, self.dictionary, self.output_dictionary,
                                                  add_eos_for_other_targets=False, shuffle=True, targets=self.targets,
                                                  add_bos_token=False)
