"""The model and data split every command-line tool of the plugin reads: a checkpoint loaded as
fairseq-generate loads it, and its split in fairseq-generate's length-sorted batches."""
import argparse

from fairseq import checkpoint_utils, utils

from pardec_fairseq.tasks.translation_pardec import TranslationPardecConfig, TranslationPardecTask


def model_and_data_parser(prog, description):
    """The arguments every command-line tool of the plugin shares: a model and a data split."""
    parser = argparse.ArgumentParser(prog=prog, description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data", help="binarized data folder (fairseq-preprocess --destdir)")
    parser.add_argument("--path", required=True, help="checkpoint of the autoregressive model (the verifier)")
    parser.add_argument("--source-lang", "-s", required=True)
    parser.add_argument("--target-lang", "-t", required=True)
    parser.add_argument("--subset", default="test", help="data split to decode")
    return parser


def load_task_and_models(args, device):
    state = checkpoint_utils.load_checkpoint_to_cpu(args.path)
    saved_task = state["cfg"].task
    cfg = TranslationPardecConfig(
        data=args.data, source_lang=args.source_lang, target_lang=args.target_lang, dataset_impl="mmap",
        left_pad_source=saved_task.get("left_pad_source", True),
        left_pad_target=saved_task.get("left_pad_target", False),
        required_seq_len_multiple=1, train_subset="train",
    )
    task = TranslationPardecTask.setup_task(cfg)
    models, _ = checkpoint_utils.load_model_ensemble([args.path], task=task, state=state)
    for model in models:
        model.eval().to(device)
    return task, models


def make_batches(task, models, args, device):
    """Length-sorted batches (as fairseq-generate makes them) of the first N sentences."""
    task.load_dataset(args.subset)
    dataset = task.dataset(args.subset)
    limit = len(dataset) if args.max_sentences is None else min(args.max_sentences, len(dataset))
    max_positions = utils.resolve_max_positions(task.max_positions(), *[m.max_positions() for m in models])
    too_long = [i for i in range(limit) if not dataset.src_sizes[i] <= max_positions[0]]
    if too_long:
        raise SystemExit(f"error: {len(too_long)} sources (ids {too_long[:5]}...) exceed the model's "
                         f"{max_positions[0]} source positions; shorten or split those lines")
    indices = dataset.ordered_indices()
    indices = indices[indices < limit]
    batches = [dataset.collater([dataset[i] for i in batch]) for batch in
               dataset.batch_by_size(indices, max_sentences=args.batch_size, required_batch_size_multiple=1)]
    return [utils.move_to_cuda(batch, device) for batch in batches] if device.type == "cuda" else batches
