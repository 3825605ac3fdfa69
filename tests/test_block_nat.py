"""GAD's block drafter: the blocks it trains on (context window included), glancing, its
bidirectional decoder, its loss, training it through fairseq-train (distributed included), and
--gen-algo gad (and gad++ with beta 1), which must output exactly fairseq's greedy output of the
verifier whatever the drafter proposes; gad++'s own flags."""
import argparse
import math
import re
from types import SimpleNamespace

import pytest
import torch
from fairseq import checkpoint_utils, options, tasks
from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
from fairseq.data import Dictionary
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from omegaconf import OmegaConf

from conftest import BLOCK_NAT, USER_DIR, run_fairseq
from pardec_fairseq.criterions.glat_block_loss import GlatBlockLossCriterion, glancing_ratio, reveal
from pardec_fairseq.decoding import DecodingConfig
from pardec_fairseq.decoding.acceptance import build_gad_plus_plus_acceptance
from pardec_fairseq.decoding.drafters.block_nat import NATBlockDrafter
from pardec_fairseq.decoding.drafters.checkpoints import load_drafter_checkpoint
from pardec_fairseq.decoding.proposals import Proposal
from pardec_fairseq.models.block_nat import BlockNATModel, block_nat_architecture, make_blocks
from pardec_fairseq.tasks.translation_block_nat import draw_prefix_lengths
from test_lossless_matches_fairseq import assert_same_hypotheses, fairseq_beam_one, plugin, sentences
from test_scripts import free_port, run_script
from tiny import build_transformer, make_batch, make_dictionary

PAD, EOS, MASK = 1, 2, 3


def test_blocks_hold_the_prefix_then_mask_slots_with_pad_targets_past_the_end():
    target = torch.tensor([[10, 11, 12, EOS], [13, EOS, PAD, PAD]])
    block_input, block_target, slots, offset = make_blocks(target, torch.tensor([2, 0]), PAD, EOS, MASK, block_size=3)
    assert block_input.tolist() == [[EOS, 10, 11, MASK, MASK, MASK],
                                    [EOS, MASK, MASK, MASK, PAD, PAD]]
    # each slot's target is the target token at its position; past EOS, padding
    assert block_target.tolist() == [[PAD, PAD, PAD, 12, EOS, PAD],
                                     [PAD, 13, EOS, PAD, PAD, PAD]]
    assert slots.tolist() == [[False, False, False, True, True, True],
                              [False, True, True, True, False, False]]
    assert offset.tolist() == [0, 0]


def test_a_context_window_shows_the_latest_prefix_tokens_at_the_first_positions():
    target = torch.tensor([[10, 11, 12, 13, EOS], [14, EOS, PAD, PAD, PAD]])
    block_input, block_target, slots, offset = make_blocks(target, torch.tensor([3, 1]), PAD, EOS, MASK,
                                                           block_size=2, window=2)
    assert block_input.tolist() == [[EOS, 11, 12, MASK, MASK], [EOS, 14, MASK, MASK, PAD]]
    assert block_target.tolist() == [[PAD, PAD, PAD, 13, EOS], [PAD, PAD, EOS, PAD, PAD]]
    assert slots.tolist() == [[False, False, False, True, True], [False, False, True, True, False]]
    assert offset.tolist() == [1, 0]  # the window hides the first token of row 0's prefix
    # a window as long as the prefixes shows them whole
    unbounded = make_blocks(target, torch.tensor([3, 1]), PAD, EOS, MASK, block_size=2)
    for bounded, whole in zip(make_blocks(target, torch.tensor([3, 1]), PAD, EOS, MASK, 2, window=3), unbounded):
        assert bounded.tolist() == whole.tolist()


def test_prefix_lengths_are_uniform_over_the_sentence_and_leave_the_eos_to_predict():
    generator = torch.Generator().manual_seed(0)
    lengths = torch.full((4000,), 5)
    drawn = draw_prefix_lengths(lengths, generator)
    counts = torch.bincount(drawn, minlength=6).tolist()
    assert counts[5] == 0 and all(700 < c < 900 for c in counts[:5])
    assert draw_prefix_lengths(torch.tensor([1, 1]), generator).tolist() == [0, 0]


def test_glancing_reveals_ratio_times_the_wrong_slots_among_real_tokens():
    slots = torch.tensor([[False, True, True, True, True, True, True]] * 2)
    wrong = torch.tensor([[False, True, True, True, True, False, False],
                          [False, True, False, False, False, False, False]])
    candidates = slots & torch.tensor([[True] * 6 + [False]] * 2)  # the last slot is past EOS
    for seed in range(20):
        revealed = reveal(slots, wrong, candidates, ratio=0.5, generator=torch.Generator().manual_seed(seed))
        assert revealed.sum(1).tolist() == [2, 0]  # round(0.5 * 4), round(0.5 * 1) (to even)
        assert not (revealed & ~candidates).any()
    assert glancing_ratio(0.5, 0.3, 1000, 0) == 0.5
    assert glancing_ratio(0.5, 0.3, 1000, 500) == pytest.approx(0.4)
    assert glancing_ratio(0.5, 0.3, 1000, 5000) == pytest.approx(0.3)
    assert glancing_ratio(0.5, 0.3, 0, 5000) == 0.5  # no annealing


def build_block_nat(dictionary, seed=0, dropout=0.0, soft_copy=False):
    args = argparse.Namespace(encoder_layers=1, decoder_layers=1, encoder_embed_dim=16, decoder_embed_dim=16,
                              encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_embed_dim=32,
                              decoder_ffn_embed_dim=32, dropout=dropout, share_all_embeddings=True,
                              max_source_positions=64, max_target_positions=64, soft_copy=soft_copy)
    block_nat_architecture(args)
    torch.manual_seed(seed)
    return BlockNATModel.build_model(args, SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary))


def test_the_decoder_attends_in_both_directions():
    dictionary = make_dictionary(20)
    model = build_block_nat(dictionary).eval()
    source = torch.tensor([[5, 6, 7, dictionary.eos()]])
    block = torch.tensor([[dictionary.eos(), 8, dictionary.unk(), dictionary.unk()]])
    later_changed = block.clone()
    later_changed[0, 3] = 9
    with torch.no_grad():
        logits, _ = model(source, torch.tensor([4]), block)
        changed, _ = model(source, torch.tensor([4]), later_changed)
    assert not torch.allclose(logits[0, 2], changed[0, 2])  # slot 2 sees position 3


def test_the_block_decoder_computes_what_fairseq_decoder_computes_with_full_context():
    dictionary = make_dictionary(20)
    model = build_block_nat(dictionary, seed=4).eval()
    pad, eos, mask = dictionary.pad(), dictionary.eos(), dictionary.unk()
    source = torch.tensor([[pad, 5, 6, eos], [7, 8, 9, eos]])  # fairseq pads sources on the left
    block = torch.tensor([[eos, 10, mask, mask, pad], [eos, 11, 12, mask, mask]])
    with torch.no_grad():
        encoder_out = model.encoder(source, src_lengths=torch.tensor([3, 4]))
        ours = model.decoder.block_features(block, encoder_out, block.eq(mask))
        fairseqs, _ = model.decoder(block, encoder_out=encoder_out, features_only=True, full_context_alignment=True)
    assert torch.allclose(ours, fairseqs, atol=1e-6)


def test_soft_copy_mixes_source_embeddings_by_distance_to_each_target_index():
    dictionary = make_dictionary(20)
    model = build_block_nat(dictionary, soft_copy=True).eval()
    pad, eos = dictionary.pad(), dictionary.eos()
    source = torch.tensor([[pad, pad, 5, 6, eos], [7, 8, 9, 10, eos]])
    with torch.no_grad():
        model.decoder.copy_log_temperature.fill_(math.log(2.0))
        encoder_out = model.encoder(source, src_lengths=torch.tensor([3, 5]))
        copied = model.decoder.soft_copy(encoder_out, width=4, offset=torch.tensor([0, 2]))
    embedding = encoder_out["encoder_embedding"][0]
    for row, first_real, offset in ((0, 2, 0), (1, 0, 2)):
        real = embedding[row, first_real:]
        for position in range(4):  # input position i stands for target index offset + i - 1
            distance = (torch.arange(len(real)) - (offset + position - 1)).abs().float()
            expected = torch.softmax(-distance / 2.0, 0) @ real
            assert torch.allclose(copied[row, position], expected, atol=1e-5)


def test_soft_copy_goes_into_the_slots_only_and_needs_matching_embedding_sizes():
    dictionary = make_dictionary(20)
    plain, copying = build_block_nat(dictionary, seed=2).eval(), build_block_nat(dictionary, seed=2, soft_copy=True)
    copying.eval()
    eos, mask = dictionary.eos(), dictionary.unk()
    source, block = torch.tensor([[5, 6, 7, eos]]), torch.tensor([[eos, 8, mask, mask]])
    with torch.no_grad():
        encoder_out = plain.encoder(source, src_lengths=torch.tensor([4]))
        no_slots = torch.zeros_like(block, dtype=torch.bool)
        assert torch.equal(copying.decoder.block_features(block, encoder_out, no_slots),
                           plain.decoder.block_features(block, encoder_out, no_slots))
        assert not torch.allclose(copying.decoder.block_features(block, encoder_out, block.eq(mask)),
                                  plain.decoder.block_features(block, encoder_out, block.eq(mask)))
    # it may start from the weights of a drafter (or verifier) without it, at temperature 1
    with torch.no_grad():
        copying.decoder.copy_log_temperature.fill_(1.0)
    copying.load_state_dict(plain.state_dict(), strict=True)
    assert copying.decoder.copy_log_temperature.item() == 0.0
    args = argparse.Namespace(encoder_embed_dim=16, decoder_embed_dim=32, share_all_embeddings=False,
                              soft_copy=True)
    block_nat_architecture(args)
    with pytest.raises(ValueError, match="--soft-copy adds source embeddings to the decoder's"):
        BlockNATModel.build_model(args, SimpleNamespace(source_dictionary=dictionary, target_dictionary=dictionary))


def criterion_for(dictionary, **options):
    task = SimpleNamespace(target_dictionary=dictionary, add_blocks=None)
    config = dict(label_smoothing=0.1, glat_ratio_start=0.5, glat_ratio_end=0.3, glat_anneal_updates=100)
    return GlatBlockLossCriterion(task, **{**config, **options})


def block_sample(dictionary, prefix):
    target = torch.tensor([[7, 8, 9, 10, dictionary.eos()], [11, dictionary.eos()] + [dictionary.pad()] * 3])
    blocks = make_blocks(target, torch.tensor(prefix), dictionary.pad(), dictionary.eos(), dictionary.unk(),
                         block_size=3)
    source = torch.tensor([[5, 6, dictionary.eos()], [dictionary.pad(), 5, dictionary.eos()]])
    return {"net_input": {"src_tokens": source, "src_lengths": torch.tensor([3, 2])}, "target": target,
            "block_input": blocks.input, "block_target": blocks.target, "slots": blocks.slots,
            "block_offset": blocks.offset, "update_num": 0}


def test_validation_loss_scores_the_slots_alone():
    dictionary = make_dictionary(20)
    model = build_block_nat(dictionary).eval()
    sample = block_sample(dictionary, prefix=[1, 0])
    loss, sample_size, log = criterion_for(dictionary)(model, sample)
    logits, _ = model(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"], sample["block_input"])
    lprobs = torch.log_softmax(logits, -1)
    slots = sample["slots"]
    expected, _ = label_smoothed_nll_loss(lprobs[slots], sample["block_target"][slots], 0.1, reduce=False)
    assert sample_size == 6 == log["slots"] and log["revealed"] == 0  # 3 slots per row, padding targets included
    assert loss.item() == pytest.approx(expected.sum().item(), rel=1e-5)
    assert log["slots_correct"] == int(logits.argmax(-1).eq(sample["block_target"])[slots].sum())


def test_training_reveals_glanced_slots_and_replays_the_dropout_masks():
    dictionary = make_dictionary(20)
    model = build_block_nat(dictionary, dropout=0.3).train()
    sample = block_sample(dictionary, prefix=[1, 0])
    criterion = criterion_for(dictionary, glat_ratio_start=1.0, glat_ratio_end=1.0)
    torch.manual_seed(3)
    with torch.no_grad():
        first, _ = model(sample["net_input"]["src_tokens"], sample["net_input"]["src_lengths"], sample["block_input"])
    torch.manual_seed(3)
    loss, sample_size, log = criterion(model, sample)
    real = sample["slots"] & sample["block_target"].ne(dictionary.pad())
    wrong = (first.argmax(-1).ne(sample["block_target"]) & sample["slots"]).sum(1)
    # ratio 1: as many slots revealed as were wrong, capped by the slots of real tokens
    assert log["revealed"] == int(torch.minimum(wrong, real.sum(1)).sum())
    assert sample_size == 6 - log["revealed"] and loss.requires_grad
    loss.backward()
    assert model.decoder.layers[0].self_attn.q_proj.weight.grad.abs().sum() > 0


def test_the_criterion_needs_the_block_task():
    with pytest.raises(ValueError, match="--task translation_block_nat"):
        GlatBlockLossCriterion(SimpleNamespace(target_dictionary=make_dictionary(5)), 0.1, 0.5, 0.3, 10)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 10_000), block_size=st.integers(1, 6), window=st.integers(0, 4),
       eos_bias=st.floats(-2.0, 3.0), batch=sentences, max_len_b=st.integers(1, 30), batch_of=st.integers(1, 6),
       tau=st.floats(0.0, 5.0), soft_copy=st.booleans())
def test_gad_and_gad_plus_plus_with_beta_one_equal_fairseq_greedy_of_the_verifier_with_an_untrained_drafter(
        seed, block_size, window, eos_bias, batch, max_len_b, batch_of, tau, soft_copy):
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, seed=seed, layers=2, eos_bias=eos_bias)
    collated = make_batch(dictionary, (batch * batch_of)[:max(len(batch), batch_of)])
    expected = fairseq_beam_one([verifier], dictionary, collated, max_len_b=max_len_b)
    drafter = NATBlockDrafter(build_block_nat(dictionary, seed=seed + 1, soft_copy=soft_copy).eval(), block_size,
                              dictionary, window)
    actual, stats = plugin("greedy", [verifier], dictionary, collated, max_len_b=max_len_b, drafter=drafter)
    assert_same_hypotheses(expected, actual)
    assert stats.iterations <= stats.tokens
    # GAD++ keeps only the verifier's top-1 when beta is 1, whatever tau
    beta_one = build_gad_plus_plus_acceptance(DecodingConfig(gad_top_beta=1, gad_tau=tau))
    actual, _ = plugin("greedy", [verifier], dictionary, collated, max_len_b=max_len_b, drafter=drafter,
                       acceptance=beta_one)
    assert_same_hypotheses(expected, actual)


def test_gad_plus_plus_takes_its_rule_from_its_own_flags():
    with pytest.raises(ValueError, match="set --gad-top-beta and --gad-tau instead of --acceptance"):
        build_gad_plus_plus_acceptance(DecodingConfig(acceptance="top-k"))
    with pytest.raises(ValueError, match="--gad-top-beta must be at least 1 and --gad-tau at least 0"):
        build_gad_plus_plus_acceptance(DecodingConfig(gad_top_beta=0))
    draft = Proposal(tokens=torch.tensor([[5, 6]]), lengths=torch.tensor([2]))
    # position 0: token 5 is second, 0.5 below the top; position 1: token 6 is third, 2.0 below
    lprobs = torch.full((1, 3, 8), -20.0)
    lprobs[0, 0, [4, 5]] = torch.tensor([-1.0, -1.5])
    lprobs[0, 1, [7, 4, 6]] = torch.tensor([-1.0, -2.0, -3.0])
    lprobs[0, 2, 4] = -1.0
    scores = SimpleNamespace(all=lambda: lprobs)
    accepted = [build_gad_plus_plus_acceptance(DecodingConfig(gad_top_beta=beta, gad_tau=tau))
                .accept(draft, scores, torch.zeros(1)).accepted.item()
                for beta, tau in ((3, 1.0), (3, 3.0), (2, 3.0), (1, 3.0))]
    assert accepted == [1, 2, 1, 0]


def test_gad_refuses_outputs_longer_than_the_drafter_positions():
    dictionary = make_dictionary(20)
    verifier = build_transformer(dictionary, max_positions=64)
    drafter = NATBlockDrafter(build_block_nat(dictionary).eval(), 8, dictionary)  # 64 positions
    with pytest.raises(ValueError, match="drafter's 64 target positions cannot hold an output of up to 60 tokens"):
        plugin("greedy", [verifier], dictionary, make_batch(dictionary, [[4, 5]]), max_len_b=60, drafter=drafter)


def hypotheses(fairseq_generate_output):
    return sorted(re.findall(r"^H-(\d+)\t\S+\t(.*)$", fairseq_generate_output, flags=re.M))


def test_fairseq_train_trains_the_drafter_and_gad_decodes_with_it(toy_experiment, toy_drafter, tmp_path):
    output = toy_drafter["log"]
    assert "block_acc" in output and "revealed" in output and "done training" in output
    assert "| valid on 'valid' subset | loss" in output
    drafter = toy_drafter["checkpoint"]
    generate = ["generate", toy_experiment["data"], "--user-dir", USER_DIR, "--task", "translation_pardec",
                "--path", toy_experiment["checkpoint"]]
    greedy = hypotheses(run_fairseq(*generate, "--beam", 1, "--batch-size", 8))
    assert len(greedy) == 100
    for batch_size in (1, 16):
        gad = run_fairseq(*generate, "--gen-algo", "gad", "--drafter-path", drafter, "--batch-size", batch_size)
        assert hypotheses(gad) == greedy
    beta_one = run_fairseq(*generate, "--gen-algo", "gad++", "--drafter-path", drafter, "--gad-top-beta", 1,
                           "--gad-tau", 3.0, "--batch-size", 16)
    assert hypotheses(beta_one) == greedy
    # a wrong --drafter-path stops fairseq-generate with the plugin's message (one command shows it
    # reaches the user; the others are checked where fairseq-generate meets them)
    with pytest.raises(AssertionError, match="is a transformer checkpoint, not a drafter"):
        run_fairseq(*generate, "--gen-algo", "gad", "--drafter-path", toy_experiment["checkpoint"])
    with pytest.raises(ValueError, match=r"--gen-algo gad and gad\+\+ draft with a trained drafter: pass its"):
        load_drafter_checkpoint(None)
    with pytest.raises(ValueError, match="--drafter-path nowhere.pt: no such checkpoint file"):
        load_drafter_checkpoint("nowhere.pt")
    # a drafter trained on other dictionaries is refused before decoding
    state = checkpoint_utils.load_checkpoint_to_cpu(str(drafter))
    state["task_state"]["target_symbols"][7] = "another-word"
    state["cfg"] = OmegaConf.to_container(state["cfg"])  # as fairseq saves it
    torch.save(state, tmp_path / "other_dictionary.pt")
    dictionary = Dictionary.load(str(toy_experiment["data"] / "dict.tgt.txt"))
    verifier = checkpoint_utils.load_model_ensemble([str(toy_experiment["checkpoint"])])[0][0]
    loaded = NATBlockDrafter.from_state(str(drafter), *load_drafter_checkpoint(str(drafter)), dictionary, dictionary,
                                        verifier)
    assert loaded.context_window == 2 and loaded.model.decoder.copy_log_temperature is not None
    with pytest.raises(ValueError, match="another target dictionary than the verifier's .*first difference at index 7"):
        other = str(tmp_path / "other_dictionary.pt")
        NATBlockDrafter.from_state(other, *load_drafter_checkpoint(other), dictionary, dictionary, verifier)
    with pytest.raises(ValueError, match="use --arch block_nat"):
        model_fairseq_train_builds(toy_experiment["data"], "--user-dir", USER_DIR, *BLOCK_NAT, "--arch", "transformer")
    with pytest.raises(ValueError, match="--block-size 5000 must be at least 1 and below the model's"):
        model_fairseq_train_builds(toy_experiment["data"], "--user-dir", USER_DIR, *BLOCK_NAT[:-1], 5000)


def model_fairseq_train_builds(*args):
    """The model ``fairseq-train args`` builds (its parser, task and ``build_model``), in this process: a
    refusal there is what the command prints, without the seconds a fresh interpreter's imports take."""
    cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(options.get_training_parser(),
                                                                     [str(arg) for arg in args]))
    return tasks.setup_task(cfg.task).build_model(cfg.model)


def test_drafter_training_with_two_local_processes(toy_experiment, tmp_path):
    output = run_script("train_distributed.sh", "--nproc", 2, "--backend", "gloo",
                        "--master", f"127.0.0.1:{free_port()}", "--log-dir", tmp_path / "logs", "--",
                        toy_experiment["data"], "--user-dir", USER_DIR, *BLOCK_NAT, "--soft-copy",
                        "--max-update", 3, "--save-dir", tmp_path / "checkpoints")
    assert "distributed init (rank 1)" in (tmp_path / "logs" / "rank1.log").read_text()
    assert "done training" in output and (tmp_path / "checkpoints" / "checkpoint_last.pt").exists()
