"""torchfair.training.checkpoint: a checkpoint of ``torchfair fit`` back as its ranker (the saved weights) and data
module (the saved settings, overridable), bad files refused in one line, and its lists scored as the model scores
its loader's batches (whole or in chunks; an ids-only ranker without item-feature tensors)."""
import os

import pytest
import torch

pytest.importorskip("pytorch_lightning")

from torchfair.training.checkpoint import LoadedRun, iter_score_lists, load_checkpoint, score_lists  # noqa: E402


def test_load_checkpoint_rebuilds_the_saved_ranker_and_data(ckpt, tmp_path):
    run = load_checkpoint(ckpt)
    assert isinstance(run, LoadedRun) and run.path == ckpt
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    for k, v in run.model.ranker.state_dict().items():
        assert torch.equal(v, saved["state_dict"][f"ranker.{k}"]), k
    assert not run.model.training  # eval mode
    assert run.meta["checkpoint"] == os.path.abspath(ckpt) and run.meta["epoch"] == saved["epoch"]
    assert run.meta["data"]["variant"] == "synthetic" and run.meta["data"]["n_test"] == 3
    assert run.meta["measures"] == list(run.model.measures) and run.meta["data_info"]["num_groups"] >= 2
    # a fit YAML's data: section and data_overrides replace the saved settings
    cfg = tmp_path / "c.yaml"
    cfg.write_text("data:\n  eval_batch_size: 7\nmodel:\n  measures: [ndcg@5]\n")
    other = load_checkpoint(ckpt, str(cfg), data_overrides={"n_test": 2})
    assert other.meta["data"]["eval_batch_size"] == 7 and other.meta["data"]["n_test"] == 2
    assert other.datamodule.hparams["n_test"] == 2 and other.meta["measures"] == ["ndcg@5"]


def test_bad_files_are_one_line_errors(ckpt, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a checkpoint")
    foreign = tmp_path / "foreign.ckpt"
    torch.save({"state_dict": {"layer.weight": torch.zeros(2)}}, foreign)
    plain = tmp_path / "plain.ckpt"
    torch.save({"weights": 1}, plain)
    for path, msg in ((tmp_path / "missing.ckpt", "no such file"), (text, "not a PyTorch checkpoint"),
                      (plain, "not a Lightning checkpoint"), (foreign, "another model")):
        with pytest.raises(ValueError, match=msg) as e:
            load_checkpoint(str(path))
        assert "\n" not in str(e.value) and "`--ckpts`" in str(e.value)
    with pytest.raises(ValueError, match="`--config`"):
        bad = tmp_path / "bad.yaml"
        bad.write_text("- a list\n")
        load_checkpoint(ckpt, str(bad))


def test_iter_score_lists_chunks_are_score_lists(ckpt):
    run = load_checkpoint(ckpt, data_overrides={"eval_batch_size": 4})  # chunks of whole batches of 4 lists
    whole = score_lists(run.model, run.datamodule, "test")
    chunks = list(iter_score_lists(run.model, run.datamodule, "test", chunk_users=7))
    assert [len(c) for c in chunks] == [8] * 7 + [4]  # 60 lists
    flat = [li for c in chunks for li in c]
    assert [li["list_id"] for li in flat] == [li["list_id"] for li in whole] == \
        [int(u) for u in run.datamodule.test_dataset.users]
    for a, b in zip(whole, flat):
        assert set(a) == {"list_id", "scores", "relevance", "groups", "items"}
        assert all(torch.equal(a[k], b[k]) for k in ("scores", "relevance", "groups", "items"))
        assert a["scores"].dim() == 1 and a["scores"].shape == a["items"].shape
    val = score_lists(run.model, run.datamodule, "val")
    assert len(val) == len(run.datamodule.val_dataset)
    for kw, name in (({"split": "train"}, "split"), ({"chunk_users": 0}, "chunk_users")):
        with pytest.raises(ValueError, match=f"`{name}`"):
            iter_score_lists(run.model, run.datamodule, **kw)  # checked at the call, before any scoring
    with pytest.raises(ValueError, match="`split`"):
        score_lists(run.model, run.datamodule, "train")


def test_ids_only_rankers_are_scored_without_item_feature_tensors(ckpt):
    """MF reads ids only: its full-catalogue batches are collated without the [B, N, genres] tensors, the same
    scores come out, and the data module's setting is restored afterwards."""
    run = load_checkpoint(ckpt)
    seen = []
    forward = run.model.forward
    run.model.forward = lambda batch: seen.append(sorted(batch)) or forward(batch)
    lists = [li for chunk in iter_score_lists(run.model, run.datamodule, "test", chunk_users=None) for li in chunk]
    assert seen and all("item_genres" not in k and "item_decade" not in k for k in seen)
    assert run.datamodule.item_features is True
    run.model.forward = forward
    want = []
    with torch.no_grad():
        for batch in run.datamodule.test_dataloader():  # every feature collated
            assert "item_genres" in batch
            s = run.model(batch)
            want += [s[b][batch["mask"][b]] for b in range(s.shape[0])]
    assert len(want) == len(lists) and all(torch.equal(a, li["scores"]) for a, li in zip(want, lists))
