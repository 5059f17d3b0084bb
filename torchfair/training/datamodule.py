"""A LightningDataModule of MovieLens ranking lists with item groups for fairness measures.

:class:`MovieLensDataModule` loads a variant (:func:`torchfair.data.movielens.load_movielens`, or the offline
``"synthetic"`` stand-in of :func:`~torchfair.data.movielens.synthetic_movielens`), encodes it, splits it
(:func:`~torchfair.data.recsys.split_ratings`), groups the items (:func:`~torchfair.data.recsys.item_groups`) and
serves batches of padded lists (:func:`~torchfair.data.recsys.collate_lists`):

* train: per user the training items plus ``num_negatives`` unrated items, re-drawn per epoch (:meth:`set_epoch`;
  Lightning calls the sampler's ``set_epoch`` at every epoch, which forwards it), users shuffled by a
  ``torch.Generator`` seeded from ``seed`` and the epoch;
* val: per user with validation ratings, every item not in the user's training ratings;
* test / predict: per user with test ratings, every item not in the user's training or validation ratings.

Batches are dicts with the keys ``user``, ``items``, ``relevance``, ``mask``, ``groups``, ``user_features``,
``item_genres``, ``item_decade`` (shapes in :func:`~torchfair.data.recsys.collate_lists`).

Example::

    >>> dm = MovieLensDataModule("synthetic", n_test=3, n_val=2, num_negatives=5, batch_size=4)
    >>> dm.setup("fit")
    >>> dm.num_users, dm.num_items, dm.group_names
    (60, 80, ['head', 'tail'])
    >>> batch = next(iter(dm.train_dataloader()))
    >>> sorted(batch)
    ['groups', 'item_decade', 'item_genres', 'items', 'mask', 'relevance', 'user', 'user_features']
"""
from __future__ import annotations

import functools
import math
import os
from typing import Any, Dict, Iterator, Optional, Tuple

import numpy as np
import pytorch_lightning as pl
import torch
from jsonargparse.typing import NonNegativeInt, OpenUnitInterval, PositiveInt, restricted_number_type
from torch.utils.data import DataLoader, DistributedSampler, Sampler

from .._validation import check_int
from ..data import movielens as _ml
from ..data import recsys as _rs

__all__ = ["MovieLensDataModule", "sample_users", "user_ids_sha256"]

#: a number in ``[0, 1)`` (``val_fraction``), as a jsonargparse range type: ``torchfair fit`` refuses others
_UnitIntervalClosedOpen = restricted_number_type("UnitIntervalClosedOpen", float, [(">=", 0), ("<", 1)],
                                                 docstring="a number in [0, 1)")

#: in-process cache of loaded and encoded data: key -> (MovieLens, Encoded)
_LOADED: Dict[Tuple, Tuple[Any, Any]] = {}


def sample_users(users: np.ndarray, size: Optional[int], seed: int) -> np.ndarray:
    """A seeded uniform sample of ``size`` of ``users`` (all of them when ``size`` is None or not smaller), in
    increasing order: ``np.random.default_rng([seed, 0x5EED])`` picks the positions."""
    users = np.asarray(users)
    if size is None or size >= len(users):
        return users.copy()
    pick = np.random.default_rng([int(seed), 0x5EED]).choice(len(users), size=int(size), replace=False)
    return np.sort(users[pick])


def user_ids_sha256(ids) -> str:
    """SHA-256 of the user ids written one per line in increasing order (the bytes of an ids file)."""
    import hashlib

    text = "".join(f"{int(u)}\n" for u in np.sort(np.asarray(ids, dtype=np.int64)))
    return hashlib.sha256(text.encode()).hexdigest()


class _EpochShuffle(Sampler):
    """A permutation of the training users drawn from a ``torch.Generator`` seeded by ``(seed, epoch)``;
    ``set_epoch`` (called by Lightning every epoch) also sets the epoch of the dataset's negatives.

    With ``bucket`` (``batch_size`` users per batch), the permutation is cut into pools of ``pool`` batches, each
    pool is sorted by list length and cut into batches, and the batches are shuffled: a batch holds lists of
    similar length, so padding (and the O(N^2) pairwise cost of fairness losses over padded lists) drops while
    every user is still seen once per epoch in a random batch order."""

    def __init__(self, dataset: _rs.TrainingListDataset, seed: int, batch_size: int = 1, bucket: bool = False,
                 pool: int = 8):
        self.dataset, self.seed, self.epoch = dataset, seed, dataset.epoch
        self.batch_size, self.bucket, self.pool = batch_size, bucket, pool

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.dataset.set_epoch(self.epoch)

    def __len__(self) -> int:
        return len(self.dataset)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator()
        g.manual_seed(int(np.random.SeedSequence([self.seed, self.epoch]).generate_state(1)[0]))
        perm = torch.randperm(len(self.dataset), generator=g)
        if not self.bucket or self.batch_size <= 1:
            return iter(perm.tolist())
        lengths = torch.as_tensor(self.dataset.lengths())[perm]
        size = self.batch_size * self.pool
        batches = []
        for start in range(0, len(perm), size):
            chunk = perm[start:start + size]
            chunk = chunk[torch.argsort(lengths[start:start + size], stable=True)]
            batches += list(torch.split(chunk, self.batch_size))
        order = torch.randperm(len(batches), generator=g).tolist()
        return iter(torch.cat([batches[i] for i in order]).tolist())


class _EvalShard(DistributedSampler):
    """This process's share of the evaluation lists under DDP, *without* the padding of ``DistributedSampler``
    (which repeats lists so that every process gets as many): every list is evaluated exactly once, so the
    corpus-level measures equal a single process's.  Processes may get different numbers of batches, which
    validation allows (the metrics synchronise once, at the end of the epoch)."""

    def __init__(self, dataset):
        super().__init__(dataset, shuffle=False, drop_last=False)

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.rank, len(self.dataset), self.num_replicas))

    def __len__(self) -> int:
        return len(range(self.rank, len(self.dataset), self.num_replicas))


def _materialise(ds) -> _rs.RankingLists:
    """The lists a dataset of ``(user, items, relevance)`` serves, in order."""
    rows = [ds[k] for k in range(len(ds))]
    return _rs.RankingLists(users=np.array([r[0] for r in rows], dtype=np.int64), items=[r[1] for r in rows],
                            relevance=[r[2] for r in rows])


def _check_open_unit(value, name: str, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or not ((0 <= value < 1) if allow_zero else (0 < value < 1)):
        raise ValueError(f"`{name}` must be in {'[0, 1)' if allow_zero else '(0, 1)'}; got {value!r}")
    return float(value)


class MovieLensDataModule(pl.LightningDataModule):
    """MovieLens ranking lists for training and evaluating rankers with fairness measures (module doc).

    All arguments are plain values, so that LightningCLI can configure it from YAML; they are saved as
    hyperparameters; the numeric ones declare their ranges in the signature (jsonargparse's ``PositiveInt``...), so
    that ``torchfair fit`` refuses a value out of range while parsing, and are checked here for Python callers.

    Args:
        variant: ``"ml-100k"``, ``"ml-1m"``, ``"ml-latest-small"``, ``"ml-20m"``, ``"ml-25m"`` or
            ``"synthetic"`` (60 users, 80 items, 3 genres, from ``seed``; no files, no network).
        root: a directory holding the variant's files (else the cache / download).
        split: ``"leave_last_n"``, ``"leave_random_n"`` (a seeded per-user random hold-out), ``"temporal"`` or
            ``"random"``; ``n_test``, ``n_val`` (leave_last_n, leave_random_n),
            ``test_fraction``, ``val_fraction`` (temporal, random): see ``split_ratings``.
        groups: ``"popularity"`` (``head_share``), ``"genre"`` (``genre`` required), ``"genres"`` (soft) or
            ``"decade"``: see ``item_groups``.
        num_negatives: unrated items added to each training list.
        batch_size, eval_batch_size, num_workers: the data loaders'.
        seed: splits, negatives, shuffling (and the synthetic data).
        download: allow the network sources.
        bucket_by_length: batch training lists of similar length together (shuffled pools of 8 batches sorted by
            length): less padding, so a pairwise fairness loss costs about 4x less on ML-100K.
        eval_users: validate and test on a seeded sample of this many users (of those with validation / test
            ratings) instead of all of them; ``None`` (default): all.  Full-catalogue lists cost about
            ``num_items`` each to score and measure, so on ML-20M (138 493 users x 26 744 items) a per-epoch
            validation of every user takes about as long as a full evaluation; 2 000 users take 1.5 % of it.
        eval_users_seed: the sample's seed (default ``seed``).  The sample is the same for validation and test
            when both have the same users (``leave_last_n``), and is recorded in ``info["eval_users"]`` (size,
            seed, how many users it was drawn from, SHA-256 of the sorted raw user ids one per line).

    After :meth:`setup`: ``num_users``, ``num_items``, ``num_groups``, ``group_names``, ``info`` (a JSON-able
    dict), ``features`` (:class:`~torchfair.data.recsys.FeatureTables`), ``encoded``, ``splits``.
    """

    def __init__(self, variant: str = "ml-100k", root: Optional[str] = None, split: str = "leave_last_n",
                 n_test: PositiveInt = 10, n_val: NonNegativeInt = 5, test_fraction: OpenUnitInterval = 0.2,
                 val_fraction: _UnitIntervalClosedOpen = 0.1, groups: str = "popularity",
                 head_share: OpenUnitInterval = 0.5, genre: Optional[str] = None,
                 num_negatives: NonNegativeInt = 100, batch_size: PositiveInt = 64,
                 eval_batch_size: PositiveInt = 64, num_workers: NonNegativeInt = 0, seed: NonNegativeInt = 0,
                 download: bool = True, bucket_by_length: bool = True, eval_users: Optional[PositiveInt] = None,
                 eval_users_seed: Optional[NonNegativeInt] = None):
        super().__init__()
        variants = _ml.VARIANTS + ("synthetic",)
        if not isinstance(variant, str) or variant not in variants:
            raise ValueError(f"`variant` must be one of {', '.join(repr(v) for v in variants)}; got {variant!r}")
        if root is not None and not isinstance(root, str):
            raise ValueError(f"`root` must be a path string or None; got {root!r}")
        if not isinstance(split, str) or split not in _rs.SPLIT_METHODS:
            raise ValueError(f"`split` must be one of {', '.join(repr(m) for m in _rs.SPLIT_METHODS)}; got {split!r}")
        if not isinstance(groups, str) or groups not in _rs.GROUP_KINDS:
            raise ValueError(f"`groups` must be one of {', '.join(repr(k) for k in _rs.GROUP_KINDS)}; "
                             f"got {groups!r}")
        if groups == "genre" and not isinstance(genre, str):
            raise ValueError(f"`genre` must name a genre when groups='genre'; got {genre!r}")
        if groups != "genre" and genre is not None:
            raise ValueError(f"`genre` is only used with groups='genre'; got genre={genre!r} with groups={groups!r}")
        # the ranges are also declared in the signature (jsonargparse types), so that `torchfair fit` refuses a bad
        # value while parsing; plain numbers from Python are checked here (and stored as plain int / float)
        n_test = check_int(n_test, "n_test", 1)
        n_val = check_int(n_val, "n_val", 0)
        test_fraction = _check_open_unit(test_fraction, "test_fraction")
        val_fraction = _check_open_unit(val_fraction, "val_fraction", allow_zero=True)
        if split == "random" and test_fraction + val_fraction >= 1:
            raise ValueError(f"`test_fraction + val_fraction` must be < 1 with split='random'; got "
                             f"{test_fraction} + {val_fraction}")
        head_share = _check_open_unit(head_share, "head_share")
        num_negatives = check_int(num_negatives, "num_negatives", 0)
        batch_size = check_int(batch_size, "batch_size", 1)
        eval_batch_size = check_int(eval_batch_size, "eval_batch_size", 1)
        num_workers = check_int(num_workers, "num_workers", 0)
        seed = check_int(seed, "seed", 0)
        if not isinstance(download, bool):
            raise ValueError(f"`download` must be a bool; got {download!r}")
        if not isinstance(bucket_by_length, bool):
            raise ValueError(f"`bucket_by_length` must be a bool; got {bucket_by_length!r}")
        if eval_users is not None:
            eval_users = check_int(eval_users, "eval_users", 1)
        if eval_users_seed is not None:
            eval_users_seed = check_int(eval_users_seed, "eval_users_seed", 0)
        # the sample options are saved only when set, so the hyperparameters of a run without them stay as they were
        self.save_hyperparameters(ignore=[k for k, v in (("eval_users", eval_users),
                                                         ("eval_users_seed", eval_users_seed)) if v is None])
        self.variant, self.root, self.split = variant, root, split
        self.n_test, self.n_val, self.test_fraction, self.val_fraction = n_test, n_val, test_fraction, val_fraction
        self.groups, self.head_share, self.genre = groups, head_share, genre
        self.num_negatives, self.batch_size, self.eval_batch_size = num_negatives, batch_size, eval_batch_size
        self.num_workers, self.seed, self.download = num_workers, seed, download
        self.bucket_by_length = bucket_by_length
        self.eval_users, self.eval_users_seed = eval_users, eval_users_seed
        self._epoch = 0
        self._ready = False
        self._train_sampler: Optional[_EpochShuffle] = None

    # ------------------------------------------------------------------------------------------- data
    def _key(self) -> Tuple:
        if self.variant == "synthetic":
            return ("synthetic", self.seed)
        if self.root is not None:
            return (self.variant, os.path.abspath(os.path.expanduser(self.root)), None)
        return (self.variant, None, str(_ml.default_cache_dir()))

    def _load(self) -> Tuple[Any, Any]:
        key = self._key()
        if key not in _LOADED:
            if self.variant == "synthetic":
                ml = _ml.synthetic_movielens(seed=self.seed)
            else:
                ml = _ml.load_movielens(self.variant, self.root, download=self.download)
            _LOADED[key] = (ml, _rs.encode(ml))
        return _LOADED[key]

    def prepare_data(self) -> None:
        """Fetch (and parse once, kept in-process) the variant's files."""
        self._load()

    def setup(self, stage: Optional[str] = None) -> None:
        """Load, encode, split, group and build the datasets (once; later calls do nothing)."""
        if self._ready:
            return
        self.movielens, self.encoded = self._load()
        enc = self.encoded
        self.splits = _rs.split_ratings(enc.ratings, self.split, n_test=self.n_test, n_val=self.n_val,
                                        test_fraction=self.test_fraction, val_fraction=self.val_fraction,
                                        seed=self.seed)
        self.item_groups = _rs.item_groups(enc, self.splits.train, self.groups, head_share=self.head_share,
                                           genre=self.genre)
        self.features = _rs.build_features(enc)
        U, I = enc.num_users, enc.num_items
        self.train_dataset = _rs.TrainingListDataset(self.splits.train, U, I, num_negatives=self.num_negatives,
                                                     seed=self.seed, epoch=self._epoch)
        seen = self.train_dataset.by_user  # one CSR copy of the training ratings for the three datasets
        self.val_dataset = _rs.EvaluationListDataset(seen, self.splits.val, I, num_users=U)
        self.test_dataset = _rs.EvaluationListDataset(seen, self.splits.test, I, exclude=self.splits.val,
                                                      num_users=U)
        sample: Dict[str, Any] = {}
        if self.eval_users is not None:
            sample = {"size": int(self.eval_users), "seed": int(self.eval_users_seed if self.eval_users_seed is not None
                                                                 else self.seed)}
            for name in ("val", "test"):
                ds = getattr(self, f"{name}_dataset")
                users = sample_users(ds.users, self.eval_users, sample["seed"])
                ds.users = users
                ids = enc.user_ids[users]
                sample[name] = {"users": int(len(users)), "of": int(len(ds.target.users_with_rows())),
                                "sha256": user_ids_sha256(ids)}
        self.num_users, self.num_items = U, I
        self.num_groups, self.group_names = self.item_groups.num_groups, list(self.item_groups.names)
        sizes = self.splits.summary()
        sizes.update(train_lists=len(self.train_dataset), val_lists=len(self.val_dataset),
                     test_lists=len(self.test_dataset))
        self.info: Dict[str, Any] = {
            "variant": self.variant, "num_users": U, "num_items": I, "num_groups": self.num_groups,
            "group_names": list(self.group_names), "group_kind": self.groups, "soft_groups": self.item_groups.soft,
            "user_features": list(self.features.user_feature_names),
            "user_cardinalities": [int(c) for c in self.features.user_cardinalities],
            "num_genres": self.features.num_genres, "genre_names": list(self.features.genre_names),
            "num_decades": self.features.num_decades, "decade_names": list(self.features.decade_names),
            "split": self.split, "split_sizes": {k: int(v) for k, v in sizes.items()},
            "source": self.movielens.source}
        if sample:
            self.info["eval_users"] = sample
        self._ready = True

    def _require(self) -> None:
        if not self._ready:
            raise RuntimeError("call `setup()` first")

    # ------------------------------------------------------------------------------------------- epochs
    def set_epoch(self, epoch: int) -> None:
        """Use the training negatives of ``epoch`` (and its shuffle) from now on."""
        self._epoch = check_int(epoch, "epoch", 0)
        if self._ready:
            self.train_dataset.set_epoch(epoch)
        if self._train_sampler is not None:
            self._train_sampler.set_epoch(epoch)

    @property
    def epoch(self) -> int:
        return self._epoch if not self._ready else self.train_dataset.epoch

    # ------------------------------------------------------------------------------------------- loaders
    #: collate ``item_genres`` / ``item_decade`` into the batches (False: leave them out, for rankers of ids only;
    #: :func:`~torchfair.training.checkpoint.iter_score_lists` sets it from the ranker's ``uses_item_features``)
    item_features: bool = True

    def _collate(self):
        return functools.partial(_rs.collate_lists, item_groups=self.item_groups, features=self.features,
                                 item_features=self.item_features)

    def train_dataloader(self) -> DataLoader:
        self._require()
        self._train_sampler = _EpochShuffle(self.train_dataset, self.seed, self.batch_size, self.bucket_by_length)
        return DataLoader(self.train_dataset, batch_size=self.batch_size, sampler=self._train_sampler,
                          collate_fn=self._collate(), num_workers=self.num_workers)

    def _eval_loader(self, ds) -> DataLoader:
        self._require()
        sampler = None
        if torch.distributed.is_available() and torch.distributed.is_initialized() and \
                torch.distributed.get_world_size() > 1:
            sampler = _EvalShard(ds)  # Lightning keeps a DistributedSampler it is given
        return DataLoader(ds, batch_size=self.eval_batch_size, shuffle=False, sampler=sampler,
                          collate_fn=self._collate(), num_workers=self.num_workers)

    def val_dataloader(self) -> DataLoader:
        return self._eval_loader(self.val_dataset)

    def test_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_dataset)

    def predict_dataloader(self) -> DataLoader:
        return self._eval_loader(self.test_dataset)

    # ------------------------------------------------------------------------------------------- reports
    def val_lists(self) -> _rs.RankingLists:
        """The validation lists (as the val loader serves them)."""
        self._require()
        return _materialise(self.val_dataset)

    def test_lists(self) -> _rs.RankingLists:
        """The test lists (as the test loader serves them)."""
        self._require()
        return _materialise(self.test_dataset)

    def eval_user_ids(self, split: str = "test") -> np.ndarray:
        """Raw ids (``userId``) of the users whose ``split`` (``"val"`` or ``"test"``) lists are served, in order."""
        self._require()
        if split not in ("val", "test"):
            raise ValueError(f"`split` must be 'val' or 'test'; got {split!r}")
        return self.encoded.user_ids[getattr(self, f"{split}_dataset").users]

    def item_group_table(self) -> _rs.ItemGroups:
        """The item groups (per item index)."""
        self._require()
        return self.item_groups
