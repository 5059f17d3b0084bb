"""MovieLensDataModule on the synthetic variant: setup, info, batches, per-epoch negatives, hyperparameters."""
import json

import numpy as np
import pytest
import pytorch_lightning as pl
import torch


def MovieLensDataModule(*args, **kwargs):
    # imported when a test runs, not at collection: see the note at the top of tests/data/test_movielens.py
    from torchfair.training import MovieLensDataModule as cls
    return cls(*args, **kwargs)


KEYS = ["user", "items", "relevance", "mask", "groups", "user_features", "item_genres", "item_decade"]


def make(**kw):
    args = dict(variant="synthetic", n_test=3, n_val=2, num_negatives=6, batch_size=8, eval_batch_size=16)
    args.update(kw)
    dm = MovieLensDataModule(**args)
    dm.prepare_data()
    dm.setup("fit")
    return dm


def test_setup_info_and_idempotence():
    dm = make()
    assert (dm.num_users, dm.num_items, dm.num_groups, dm.group_names) == (60, 80, 2, ["head", "tail"])
    info = json.loads(json.dumps(dm.info))  # plain JSON
    assert info["num_users"] == 60 and info["num_items"] == 80 and info["group_kind"] == "popularity"
    assert info["soft_groups"] is False and info["user_cardinalities"] == [8, 3, 6]
    assert info["num_genres"] == 3 and info["genre_names"] == ["Action", "Comedy", "Drama"]
    assert info["num_decades"] == len(info["decade_names"]) and info["decade_names"][0] == "unknown"
    sizes = info["split_sizes"]
    assert sizes["test"] == 180 and sizes["val"] == 120 and sizes["test_lists"] == 60
    assert sizes["train"] + sizes["val"] + sizes["test"] == len(dm.encoded.ratings)
    ds = dm.train_dataset
    dm.setup("test")
    assert dm.train_dataset is ds
    # a second datamodule reuses the loaded data
    assert make().encoded is dm.encoded


def test_batches_and_lists():
    dm = make()
    b = next(iter(dm.train_dataloader()))
    assert list(b) == KEYS and b["user"].shape == (8,)
    B, N = b["items"].shape
    assert b["groups"].shape == (B, N) and b["item_genres"].shape == (B, N, 3) and b["user_features"].shape == (B, 3)
    lens = b["mask"].sum(1)
    train = dm.splits.train
    for k in range(B):
        u = int(b["user"][k])
        assert int(lens[k]) == (train.user == u).sum() + 6
    assert (b["relevance"][~b["mask"]] == 0).all() and (b["items"][~b["mask"]] == 0).all()
    test = dm.test_lists()
    t = next(iter(dm.test_dataloader()))
    assert t["user"].tolist() == test.users[:16].tolist()
    val = dm.splits.val
    for k in range(len(test)):
        u, items, rel = test[k]
        seen = set(train[train.user == u].item) | set(val[val.user == u].item)
        assert not seen & set(items.tolist()) and len(items) == 80 - len(seen)
        assert (rel > 0).sum() == 3
    v = dm.val_lists()
    assert len(v) == 60 and all(len(i) == 80 - (train.user == u).sum() for u, i in zip(v.users, v.items))
    assert dm.item_group_table().ids.shape == (80,)
    p = next(iter(dm.predict_dataloader()))
    assert torch.equal(p["items"], t["items"])


def _epoch_lists(dm):
    out = {}
    for b in dm.train_dataloader():
        for u, items, m in zip(b["user"], b["items"], b["mask"]):
            out[int(u)] = sorted(items[m].tolist())
    return out


def test_set_epoch_redraws_negatives_deterministically():
    dm = make()
    e0 = _epoch_lists(dm)
    order0 = next(iter(dm.train_dataloader()))["user"].tolist()
    dm.set_epoch(1)
    e1 = _epoch_lists(dm)
    assert e0.keys() == e1.keys() and e0 != e1
    assert next(iter(dm.train_dataloader()))["user"].tolist() != order0  # reshuffled too
    dm.set_epoch(0)
    assert _epoch_lists(dm) == e0 and next(iter(dm.train_dataloader()))["user"].tolist() == order0
    other = make()
    other.set_epoch(1)
    assert _epoch_lists(other) == e1
    assert make(seed=1).encoded is not dm.encoded  # the synthetic data follows the seed


def test_lightning_sets_the_epoch_each_epoch(tmp_path):
    seen = []

    class Probe(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(()))

        def training_step(self, batch, i):
            seen.append((self.current_epoch, sorted(batch["items"][0][batch["mask"][0]].tolist()),
                         int(batch["user"][0])))
            return (self.w - 1) ** 2

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    dm = make(batch_size=60)
    trainer = pl.Trainer(max_epochs=2, limit_val_batches=0, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, default_root_dir=str(tmp_path))
    trainer.fit(Probe(), datamodule=dm)
    assert [e for e, _, _ in seen] == [0, 1] and dm.epoch == 1
    ref = make(batch_size=60)
    for epoch, items, user in seen:
        ref.set_epoch(epoch)
        assert _epoch_lists(ref)[user] == items


def test_soft_and_genre_groups():
    dm = make(groups="genres")
    b = next(iter(dm.val_dataloader()))
    assert b["groups"].dtype == torch.float32 and b["groups"].shape == b["items"].shape + (3,)
    sums = b["groups"].sum(-1)
    assert torch.all(torch.isclose(sums, torch.ones(())) | (sums == 0)) and (sums[~b["mask"]] == 0).all()
    assert dm.info["soft_groups"] is True and dm.num_groups == 3
    dm = make(groups="genre", genre="Comedy")
    assert dm.group_names == ["not Comedy", "Comedy"]
    with pytest.raises(ValueError, match="`genre`"):
        make(groups="genre", genre="Western")


def test_hyperparameters_and_validation():
    dm = MovieLensDataModule("synthetic", split="temporal", groups="decade", seed=3, num_negatives=4)
    hp = dict(dm.hparams)
    assert hp == dict(variant="synthetic", root=None, split="temporal", n_test=10, n_val=5, test_fraction=0.2,
                      val_fraction=0.1, groups="decade", head_share=0.5, genre=None, num_negatives=4, batch_size=64,
                      eval_batch_size=64, num_workers=0, seed=3, download=True, bucket_by_length=True)
    for kw, name in [({"variant": "ml-10m"}, "variant"), ({"split": "x"}, "split"), ({"n_test": 0}, "n_test"),
                     ({"groups": "genre"}, "genre"), ({"genre": "Drama"}, "genre"), ({"head_share": 1}, "head_share"),
                     ({"batch_size": 0}, "batch_size"), ({"seed": -1}, "seed"), ({"download": "yes"}, "download"),
                     ({"test_fraction": 0}, "test_fraction"), ({"num_negatives": 1.5}, "num_negatives")]:
        with pytest.raises(ValueError, match=f"`{name}`"):
            MovieLensDataModule(**{"variant": "synthetic", **kw})
    with pytest.raises(RuntimeError, match="setup"):
        MovieLensDataModule("synthetic").train_dataloader()


#: every numeric argument of MovieLensDataModule: values its documented range accepts and refuses
DATA_RANGES = {"n_test": ([1, 7], [0, -1]), "n_val": ([0, 3], [-1]), "test_fraction": ([0.01, 0.99], [0, 1, -0.1]),
               "val_fraction": ([0, 0.5], [1, -0.1, 1.5]), "head_share": ([0.5, 0.001], [0, 1]),
               "num_negatives": ([0, 5], [-1]), "batch_size": ([1, 9], [0]), "eval_batch_size": ([1], [0]),
               "num_workers": ([0, 2], [-1]), "seed": ([0, 3], [-1]), "eval_users": ([1, 50], [0, -3]),
               "eval_users_seed": ([0, 4], [-1])}


def test_ranges_are_declared_in_the_signature_and_checked_for_python_callers():
    """Each numeric argument is annotated with a jsonargparse range type (what `torchfair fit` checks while
    parsing), which refuses exactly the values the constructor refuses for a Python caller (ValueError naming the
    argument); plain numbers are accepted and kept as plain int / float."""
    import inspect
    import typing

    from torchfair.training import MovieLensDataModule as cls

    params = inspect.signature(cls).parameters
    numeric = {k for k, p in params.items() if k.startswith("eval_users") or
               isinstance(p.default, (int, float)) and not isinstance(p.default, bool)}
    assert numeric == set(DATA_RANGES)
    hints = typing.get_type_hints(cls.__init__)
    for name, (good, bad) in DATA_RANGES.items():
        hint = hints[name]
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        tp = inner[0] if name.startswith("eval_users") else hint
        assert hasattr(tp, "_expression"), name
        for v in good:
            tp(v)
            dm = cls("synthetic", **{name: v})
            assert getattr(dm, name) == v and type(getattr(dm, name)) in (int, float), name
        for v in bad:
            with pytest.raises(ValueError):
                tp(v)
            with pytest.raises(ValueError, match=f"`{name}`"):
                cls("synthetic", **{name: v})
    # the check across arguments (no type can make it): only with split='random'
    with pytest.raises(ValueError, match=r"`test_fraction \+ val_fraction` must be < 1 with split='random'"):
        cls("synthetic", split="random", test_fraction=0.5, val_fraction=0.5)
    cls("synthetic", split="temporal", test_fraction=0.5, val_fraction=0.5)


def test_worker_processes_see_the_epoch():
    dm = make(num_workers=1)
    dm.set_epoch(2)
    ref = make()
    ref.set_epoch(2)
    assert _epoch_lists(dm) == _epoch_lists(ref)


def test_no_network_needed_for_real_variant_with_root(tmp_path):
    (tmp_path / "u.data").write_text("1\t1\t5\t10\n1\t2\t3\t20\n2\t1\t4\t30\n2\t2\t2\t40\n")
    flags = lambda k: "|".join("1" if j == k else "0" for j in range(19))  # noqa: E731
    (tmp_path / "u.item").write_text(f"1|A (1995)|||x|{flags(1)}\n2|B (1981)|||x|{flags(8)}\n3|C (1990)|||x|{flags(8)}\n")
    (tmp_path / "u.user").write_text("1|20|M|writer|1\n2|40|F|artist|2\n")
    dm = make(variant="ml-100k", root=str(tmp_path), n_test=1, n_val=0, num_negatives=1, download=False)
    assert (dm.num_users, dm.num_items) == (2, 3) and dm.info["genre_names"] == ["Action", "Drama"]
    b = next(iter(dm.test_dataloader()))
    assert b["items"].tolist() == [[1, 2], [1, 2]] and b["relevance"].tolist() == [[3, 0], [2, 0]]
    assert np.array_equal(b["mask"].numpy(), np.ones((2, 2), bool))


def test_length_buckets_cut_padding_and_keep_every_user_once_per_epoch():
    """Pools of 8 batches sorted by length: every user once per epoch, a deterministic order per (seed, epoch), and
    less padding than a plain shuffle (counted by hand from the list lengths)."""
    from torchfair.training.datamodule import _EpochShuffle
    dm = make(batch_size=4, num_negatives=3)
    ds = dm.train_dataset
    lengths = ds.lengths()
    assert all(len(ds[k][1]) == lengths[k] for k in range(len(ds)))
    plain, bucket = _EpochShuffle(ds, 0, 4, False), _EpochShuffle(ds, 0, 4, True)

    def padded(order):
        return sum(4 * max(lengths[order[i:i + 4]]) for i in range(0, len(order), 4))

    for epoch in range(3):
        plain.set_epoch(epoch)
        bucket.set_epoch(epoch)
        a, b = list(plain), list(bucket)
        assert sorted(b) == list(range(len(ds))) and b == list(bucket)
        assert padded(b) < padded(a)
    bucket.set_epoch(0)
    first = list(bucket)
    bucket.set_epoch(1)
    assert list(bucket) != first
