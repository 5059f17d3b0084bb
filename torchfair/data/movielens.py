"""MovieLens ratings, movies and users as pandas DataFrames: the GroupLens files, verified, parsed strictly.

:func:`load_movielens` returns a :class:`MovieLens` for one of :data:`VARIANTS` (Harper & Konstan, "The MovieLens
Datasets: History and Context", ACM TiiS 2015).  Where the files come from, in order:

1. ``root=``: a directory you name holding the variant's files (or a ``<variant>/`` folder holding them), in the
   GroupLens layout or as RecBole atomic files (``<name>.inter``, ``<name>.item``, ``<name>.user``); not
   checksummed (your data) but parsed strictly;
2. the cache ``<cache>/<variant>/``, ``<cache>`` = ``cache_dir`` or ``$TORCHFAIR_DATA`` or
   ``$XDG_CACHE_HOME/torchfair`` or ``~/.cache/torchfair``; files this module put there are re-verified against
   the hashes it recorded (the RecBole ML-100K files against the SHA-256 written in this module);
3. with ``download=True``: the official GroupLens archive ``https://files.grouplens.org/datasets/movielens/
   <variant>.zip``, verified against the checksum written in this module, extracted into the cache;
4. ML-100K only, when (3) fails: the ``recbole==1.2.1`` wheel from the package index (``pip download``, never
   installed), whose ``recbole/dataset_example/ml-100k/ml-100k.{inter,item,user}`` are verified and written to
   the cache.  A wheel already in ``<cache>/wheels`` is reused (also offline).

``TORCHFAIR_OFFLINE=1`` skips the network sources (3) and (4).  When nothing works, :class:`DataUnavailableError`
lists each source tried and where to put the files by hand.  A checksum mismatch is a :class:`ChecksumError`
(a ``ValueError``) naming the file and both hashes; a malformed file is a :class:`DataFormatError` (a
``ValueError``) naming the file and the 1-based line.

Frames: ``ratings`` (``user_id`` int64, ``item_id`` int64, ``rating`` float32, ``timestamp`` int64, in file
order); ``items`` sorted by ``item_id`` (``title`` without the trailing `` (1995)``, ``year`` nullable ``Int64``,
``genres`` a list of genre names; ML-100K's ``unknown`` genre flag and the csv's ``(no genres listed)`` give an
empty list); ``users`` sorted by ``user_id`` with the demographics the variant has (ML-100K: ``age`` in years,
``gender``, ``occupation``, ``zip_code``; ML-1M: the same columns, ``age`` being the bucket code 1, 18, 25, 35,
45, 50, 56 and ``occupation`` the integer code of the ML-1M README; csv variants: ``user_id`` only).

:func:`synthetic_movielens` makes a small deterministic stand-in with the same structure (no network), used by the
tests and smoke runs.

Example::

    >>> ml = synthetic_movielens(n_users=6, n_items=8, seed=0)
    >>> list(ml.ratings.columns), list(ml.users.columns)
    (['user_id', 'item_id', 'rating', 'timestamp'], ['user_id', 'age', 'gender', 'occupation', 'zip_code'])
    >>> ml.genres, len(ml.items)
    (['Action', 'Comedy', 'Drama'], 8)
"""
from __future__ import annotations

import csv
import functools
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .._extras import require

require("torchfair.data.movielens", "train", ("pandas",))

import pandas as pd  # noqa: E402

__all__ = ["MovieLens", "load_movielens", "synthetic_movielens", "DataFormatError", "ChecksumError",
           "DataUnavailableError", "VARIANTS", "default_cache_dir"]

#: the MovieLens variants :func:`load_movielens` knows
VARIANTS = ("ml-100k", "ml-1m", "ml-latest-small", "ml-20m", "ml-25m")

GROUPLENS_URL = "https://files.grouplens.org/datasets/movielens/{variant}.zip"

#: checksum of the GroupLens archive per variant: (algorithm, hex digest).  The MD5s are the ones GroupLens
#: publishes next to the archives.  The ml-latest-small SHA-256 comes from a public dataset card and was NOT
#: verified from here (the archive could not be fetched when this was written); ml-latest-small is also
#: re-published by GroupLens from time to time, so a mismatch may mean a newer release rather than tampering.
_ARCHIVE_CHECKSUMS: Dict[str, Tuple[str, str]] = {
    "ml-100k": ("md5", "0e33842e24a9c977be4e0107933c0723"),
    "ml-1m": ("md5", "c4d9eecfca2ab87c1945afe126590906"),
    "ml-20m": ("md5", "cd245b17a1ae2cc31bb14903e1204af3"),
    "ml-25m": ("md5", "6b51fb2759a8657d3bfcbfc42b592ada"),
    "ml-latest-small": ("sha256", "696d65a3dfceac7c45750ad32df2c259311949efec81f0f144fdfb91ebc9e436"),
}

RECBOLE_VERSION = "1.2.1"
_RECBOLE_WHEEL = f"recbole-{RECBOLE_VERSION}-py3-none-any.whl"
#: SHA-256 of the recbole 1.2.1 wheel and of the ML-100K atomic files inside it (measured from the wheel)
_RECBOLE_WHEEL_SHA256 = "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407"
_RECBOLE_SHA256: Dict[str, str] = {
    "ml-100k.inter": "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff",
    "ml-100k.item": "51d7cdf777ce5c0f5b32c1d947a4a81fe07d75e78abbe761e0cd4d0756064532",
    "ml-100k.user": "4f670007d9cfbeb9807e757209af1555b9bcc186bde25e767f67cb67c6dd5972",
}
_RECBOLE_MEMBER = "recbole/dataset_example/ml-100k/{name}"

#: the 19 genre flags of ML-100K's ``u.item``, in the order of ``u.genre``
ML100K_GENRE_FLAGS = ("unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary",
                      "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi",
                      "Thriller", "War", "Western")
#: genre names that mean "no genre" (dropped from the genre lists)
_NO_GENRE = {"unknown", "(no genres listed)"}

#: the rating scale per variant (inclusive)
_RATING_RANGE = {"ml-100k": (1.0, 5.0), "ml-1m": (1.0, 5.0), "ml-latest-small": (0.5, 5.0),
                 "ml-20m": (0.5, 5.0), "ml-25m": (0.5, 5.0), "synthetic": (1.0, 5.0)}

#: the GroupLens layout per variant: (ratings, items, users or None)
_GROUPLENS_FILES = {"ml-100k": ("u.data", "u.item", "u.user"), "ml-1m": ("ratings.dat", "movies.dat", "users.dat"),
                    "ml-latest-small": ("ratings.csv", "movies.csv", None), "ml-20m": ("ratings.csv", "movies.csv", None),
                    "ml-25m": ("ratings.csv", "movies.csv", None)}

_MANIFEST = ".torchfair-source.json"
_DOWNLOAD_TIMEOUT = 20.0
_PIP_TIMEOUT = 300.0
_TITLE_YEAR = re.compile(r"\s*\((\d{4})\)\s*$")


class DataFormatError(ValueError):
    """A data file is missing or malformed; ``file`` and ``line`` (1-based, None when not about one line)."""

    def __init__(self, file: str, line: Optional[int], reason: str):
        self.file, self.line, self.reason = str(file), line, reason
        where = f"{file}, line {line}" if line is not None else str(file)
        super().__init__(f"{where}: {reason}")


class ChecksumError(ValueError):
    """A file's hash differs from the one recorded: ``file``, ``algorithm``, ``expected``, ``actual``."""

    def __init__(self, file: str, algorithm: str, expected: str, actual: str, note: str = ""):
        self.file, self.algorithm, self.expected, self.actual = str(file), algorithm, expected, actual
        super().__init__(f"checksum mismatch for {file}: expected {algorithm} {expected}, got {actual}"
                         + (f"; {note}" if note else ""))


class DataUnavailableError(RuntimeError):
    """No source could provide the files; ``attempts`` lists ``(source, why it failed)``."""

    def __init__(self, message: str, attempts: Sequence[Tuple[str, str]]):
        self.attempts = list(attempts)
        super().__init__(message)


class _SourceFailed(Exception):
    """Internal: a source could not provide the files (the reason is recorded, the next source is tried)."""


@dataclass(repr=False)
class MovieLens:
    """A loaded MovieLens variant: ``ratings``, ``items``, ``users`` DataFrames (module doc) and provenance.

    ``genres``: sorted genre names; ``source``: where the files came from; ``files``: file name -> SHA-256 of
    the bytes read."""

    variant: str
    ratings: pd.DataFrame
    items: pd.DataFrame
    users: pd.DataFrame
    genres: List[str]
    source: str
    files: Dict[str, str] = field(default_factory=dict)

    @property
    def rating_range(self) -> Tuple[float, float]:
        """The rating scale ``(low, high)`` of the variant."""
        return _RATING_RANGE.get(self.variant, (0.5, 5.0))

    def __repr__(self) -> str:
        return (f"MovieLens(variant={self.variant!r}, ratings={len(self.ratings)}, users={len(self.users)}, "
                f"items={len(self.items)}, genres={len(self.genres)}, source={self.source!r})")


# --------------------------------------------------------------------------------------------------- locations

def default_cache_dir() -> Path:
    """``$TORCHFAIR_DATA``, else ``$XDG_CACHE_HOME/torchfair``, else ``~/.cache/torchfair``."""
    env = os.environ.get("TORCHFAIR_DATA")
    if env:
        return Path(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg:
        return Path(os.path.expanduser(xdg)) / "torchfair"
    return Path(os.path.expanduser("~")) / ".cache" / "torchfair"


def _offline() -> bool:
    return os.environ.get("TORCHFAIR_OFFLINE", "").strip().lower() not in ("", "0", "false", "no")


def _expected_names(variant: str) -> str:
    r, i, u = _GROUPLENS_FILES[variant]
    glens = ", ".join(n for n in (r, i, u) if n)
    return f"the GroupLens files {glens} (from {variant}.zip) or RecBole atomic files {variant}.inter, " \
           f"{variant}.item[, {variant}.user]"


def _detect_layout(directory: Path, variant: str) -> Optional[Tuple[str, str]]:
    """``("grouplens", "")`` or ``("atomic", name)`` for the files in ``directory``, else None."""
    if not directory.is_dir():
        return None
    if (directory / _GROUPLENS_FILES[variant][0]).is_file():
        return "grouplens", ""
    if (directory / f"{variant}.inter").is_file():
        return "atomic", variant
    inters = sorted(p.stem for p in directory.glob("*.inter") if p.is_file())
    if len(inters) == 1:
        return "atomic", inters[0]
    return None


# --------------------------------------------------------------------------------------------------- hashing

def _digest(data: bytes, algorithm: str) -> str:
    return hashlib.new(algorithm, data).hexdigest()


def _file_digest(path: Path, algorithm: str) -> str:
    h = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _read(path: Path, files: Dict[str, str], expected: Optional[Dict[str, str]]) -> bytes:
    """The bytes of ``path``; records their SHA-256 in ``files`` and checks it against ``expected`` if listed."""
    if not path.is_file():
        raise DataFormatError(str(path), None, "file not found")
    data = path.read_bytes()
    sha = _digest(data, "sha256")
    files[path.name] = sha
    if expected and path.name in expected and expected[path.name] != sha:
        raise ChecksumError(str(path), "sha256", expected[path.name], sha,
                            "delete the file (or its folder) to fetch it again")
    return data


# --------------------------------------------------------------------------------------------------- parsing

def _decode(data: bytes, fname: str, encoding: str) -> List[str]:
    """Lines of the file (no terminators, the final newline not making an empty line); an empty line -> error."""
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise DataFormatError(fname, line, f"not valid {encoding} text") from None
    if not text:
        raise DataFormatError(fname, None, "the file is empty")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    lines = [s[:-1] if s.endswith("\r") else s for s in lines]
    for k, s in enumerate(lines):
        if not s.strip():
            raise DataFormatError(fname, k + 1, "empty line")
    return lines


def _split(line: str, sep: str, quoted: bool) -> List[str]:
    if quoted:
        return next(csv.reader([line]))
    return line.split(sep)


def _int(s: str, fname: str, line: int, what: str) -> int:
    try:
        return int(s.strip())
    except ValueError:
        raise DataFormatError(fname, line, f"{what} must be an integer; got {s!r}") from None


def _fields(parts: List[str], n: int, fname: str, line: int) -> List[str]:
    if len(parts) != n:
        raise DataFormatError(fname, line, f"expected {n} fields, found {len(parts)} (truncated or malformed line)")
    return parts


def _atomic_header(line: str, fname: str) -> List[str]:
    names = [h.split(":", 1)[0].strip() for h in line.split("\t")]
    if len(set(names)) != len(names) or not all(names):
        raise DataFormatError(fname, 1, f"malformed header {line!r}")
    return names


def _title_year(title: str) -> Tuple[str, Optional[int]]:
    """``"Toy Story (1995)"`` -> ``("Toy Story", 1995)``; no trailing ``(YYYY)`` -> ``(title, None)``."""
    m = _TITLE_YEAR.search(title)
    if not m:
        return title.strip(), None
    return title[:m.start()].strip(), int(m.group(1))


def _genre_list(names) -> List[str]:
    return [g for g in names if g and g not in _NO_GENRE]


def _items_frame(ids, titles, years, genres, fname: str, header: int) -> pd.DataFrame:
    df = pd.DataFrame({"item_id": np.asarray(ids, dtype=np.int64), "title": pd.Series(titles, dtype=object),
                       "year": pd.array(years, dtype="Int64"), "genres": pd.Series(genres, dtype=object)})
    _no_duplicates(df["item_id"].to_numpy(), fname, header, "item id")
    return df.sort_values("item_id", kind="stable").reset_index(drop=True)


def _no_duplicates(ids: np.ndarray, fname: str, header: int, what: str) -> None:
    dup = pd.Series(ids).duplicated().to_numpy()
    if dup.any():
        r = int(np.flatnonzero(dup)[0])
        raise DataFormatError(fname, r + 1 + header, f"duplicate {what} {int(ids[r])}")


def _parse_u_item(data: bytes, fname: str, genre_names: Sequence[str]) -> pd.DataFrame:
    ids, titles, years, genres = [], [], [], []
    nflags = len(genre_names)
    for k, line in enumerate(_decode(data, fname, "latin-1"), 1):
        f = _fields(line.split("|"), 5 + nflags, fname, k)
        ids.append(_int(f[0], fname, k, "the item id"))
        title, year = _title_year(f[1])
        if year is None and re.search(r"\d{4}$", f[2].strip()):  # release date dd-Mon-yyyy
            year = int(f[2].strip()[-4:])
        flags = f[5:]
        if any(x not in ("0", "1") for x in flags):
            raise DataFormatError(fname, k, f"genre flags must be 0 or 1; got {'|'.join(flags)!r}")
        titles.append(title)
        years.append(year)
        genres.append(_genre_list(g for g, x in zip(genre_names, flags) if x == "1"))
    return _items_frame(ids, titles, years, genres, fname, 0)


def _parse_u_genre(data: bytes, fname: str) -> List[str]:
    text = data.decode("latin-1")
    pairs = []
    for k, line in enumerate(text.split("\n"), 1):
        line = line.strip()
        if not line:  # u.genre ends with a blank line
            continue
        f = line.split("|")
        if len(f) != 2:
            raise DataFormatError(fname, k, f"expected 2 fields, found {len(f)}")
        pairs.append((_int(f[1], fname, k, "the genre index"), f[0]))
    pairs.sort()
    if [i for i, _ in pairs] != list(range(len(pairs))):
        raise DataFormatError(fname, None, "genre indices must be 0, 1, 2, ...")
    return [name for _, name in pairs]


def _parse_movies_dat(data: bytes, fname: str) -> pd.DataFrame:
    ids, titles, years, genres = [], [], [], []
    for k, line in enumerate(_decode(data, fname, "latin-1"), 1):
        f = _fields(line.split("::"), 3, fname, k)
        ids.append(_int(f[0], fname, k, "the movie id"))
        title, year = _title_year(f[1])
        titles.append(title)
        years.append(year)
        genres.append(_genre_list(f[2].split("|")))
    return _items_frame(ids, titles, years, genres, fname, 0)


def _parse_movies_csv(data: bytes, fname: str) -> pd.DataFrame:
    lines = _decode(data, fname, "utf-8")
    head = _split(lines[0], ",", True)
    need = ("movieId", "title", "genres")
    if any(n not in head for n in need):
        raise DataFormatError(fname, 1, f"the header must name {', '.join(need)}; got {lines[0]!r}")
    ci, ct, cg = (head.index(n) for n in need)
    ids, titles, years, genres = [], [], [], []
    for k, line in enumerate(lines[1:], 2):
        try:
            f = _fields(_split(line, ",", True), len(head), fname, k)
        except csv.Error as e:
            raise DataFormatError(fname, k, f"malformed csv line ({e})") from None
        ids.append(_int(f[ci], fname, k, "the movie id"))
        title, year = _title_year(f[ct])
        titles.append(title)
        years.append(year)
        genres.append(_genre_list(f[cg].split("|")))
    return _items_frame(ids, titles, years, genres, fname, 1)


def _atomic_lines(data: bytes, fname: str) -> List[str]:
    try:
        return _decode(data, fname, "utf-8")
    except DataFormatError as e:
        if "utf-8" in e.reason:
            return _decode(data, fname, "latin-1")
        raise


def _parse_atomic_item(data: bytes, fname: str) -> pd.DataFrame:
    lines = _atomic_lines(data, fname)
    head = _atomic_header(lines[0], fname)
    if "item_id" not in head:
        raise DataFormatError(fname, 1, f"the header must name item_id; got {lines[0]!r}")
    pick = lambda *names: next((head.index(n) for n in names if n in head), None)  # noqa: E731
    ci, ct = head.index("item_id"), pick("movie_title", "title")
    cy, cg = pick("release_year", "year"), pick("class", "genre", "genres")
    ids, titles, years, genres = [], [], [], []
    for k, line in enumerate(lines[1:], 2):
        f = _fields(line.split("\t"), len(head), fname, k)
        ids.append(_int(f[ci], fname, k, "the item id"))
        title, year = _title_year(f[ct]) if ct is not None else ("", None)
        if cy is not None and re.fullmatch(r"\d{4}", f[cy].strip()):
            year = int(f[cy])
        titles.append(title)
        years.append(year)
        g = f[cg].strip() if cg is not None else ""
        genres.append([] if g in _NO_GENRE else _genre_list(g.split(" ")))
    return _items_frame(ids, titles, years, genres, fname, 1)


def _users_frame(cols: Dict[str, list], fname: str, header: int) -> pd.DataFrame:
    df = pd.DataFrame(cols)
    df["user_id"] = df["user_id"].astype(np.int64)
    _no_duplicates(df["user_id"].to_numpy(), fname, header, "user id")
    return df.sort_values("user_id", kind="stable").reset_index(drop=True)


def _parse_u_user(data: bytes, fname: str) -> pd.DataFrame:
    cols: Dict[str, list] = {"user_id": [], "age": [], "gender": [], "occupation": [], "zip_code": []}
    for k, line in enumerate(_decode(data, fname, "latin-1"), 1):
        f = _fields(line.split("|"), 5, fname, k)
        cols["user_id"].append(_int(f[0], fname, k, "the user id"))
        cols["age"].append(_int(f[1], fname, k, "the age"))
        cols["gender"].append(f[2])
        cols["occupation"].append(f[3])
        cols["zip_code"].append(f[4])
    df = _users_frame(cols, fname, 0)
    df["age"] = df["age"].astype(np.int64)
    return df


def _parse_users_dat(data: bytes, fname: str) -> pd.DataFrame:
    cols: Dict[str, list] = {"user_id": [], "age": [], "gender": [], "occupation": [], "zip_code": []}
    for k, line in enumerate(_decode(data, fname, "latin-1"), 1):
        f = _fields(line.split("::"), 5, fname, k)
        cols["user_id"].append(_int(f[0], fname, k, "the user id"))
        cols["gender"].append(f[1])
        cols["age"].append(_int(f[2], fname, k, "the age code"))
        cols["occupation"].append(_int(f[3], fname, k, "the occupation code"))
        cols["zip_code"].append(f[4])
    df = _users_frame(cols, fname, 0)
    df["age"] = df["age"].astype(np.int64)
    df["occupation"] = df["occupation"].astype(np.int64)
    return df


def _parse_atomic_user(data: bytes, fname: str) -> pd.DataFrame:
    lines = _atomic_lines(data, fname)
    head = _atomic_header(lines[0], fname)
    if "user_id" not in head:
        raise DataFormatError(fname, 1, f"the header must name user_id; got {lines[0]!r}")
    cols: Dict[str, list] = {n: [] for n in head}
    for k, line in enumerate(lines[1:], 2):
        f = _fields(line.split("\t"), len(head), fname, k)
        for n, v in zip(head, f):
            if n == "user_id":
                v = _int(v, fname, k, "the user id")
            elif n == "age":
                v = _int(v, fname, k, "the age")
            cols[n].append(v)
    order = ["user_id"] + [n for n in ("age", "gender", "occupation", "zip_code") if n in head] + \
            [n for n in head if n not in ("user_id", "age", "gender", "occupation", "zip_code")]
    df = _users_frame({n: cols[n] for n in order}, fname, 1)
    if "age" in df:
        df["age"] = df["age"].astype(np.int64)
    return df


_RATING_COLUMNS = ("user_id", "item_id", "rating", "timestamp")


def _check_rating_line(line: str, k: int, fname: str, sep: str, nfields: int, cols: Sequence[int],
                       rating_range: Tuple[float, float]) -> None:
    """Raise a :class:`DataFormatError` if line ``k`` (1-based) of a ratings file is malformed."""
    lo, hi = rating_range
    if not line.strip():
        raise DataFormatError(fname, k, "empty line")
    f = _fields(line.split(sep), nfields, fname, k)
    for name, c in zip(_RATING_COLUMNS, cols):
        try:
            v = float(f[c].strip())
        except ValueError:
            raise DataFormatError(fname, k, f"the {name} must be a number; got {f[c]!r}") from None
        if not np.isfinite(v) or (name != "rating" and not float(v).is_integer()):
            raise DataFormatError(fname, k, f"the {name} must be {'finite' if name == 'rating' else 'an integer'}"
                                            f"; got {f[c]!r}")
        if name == "rating" and not (lo <= v <= hi):
            raise DataFormatError(fname, k, f"rating {v:g} outside [{lo:g}, {hi:g}]")


def _lines_latin1(data: bytes) -> List[str]:
    lines = data.decode("latin-1").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [s[:-1] if s.endswith("\r") else s for s in lines]


def _first_bad_field_count(data: bytes, sep: str, nfields: int, skip: int) -> Optional[int]:
    """1-based number of the first line after ``skip`` header lines without exactly ``nfields`` fields
    (separators counted with numpy, in chunks of whole lines), None if every line has them."""
    arr = np.frombuffer(data, dtype=np.uint8)
    s, n = ord(sep), len(arr)
    start, base = 0, 0
    while start < n:
        end = min(n, start + (1 << 26))
        if end < n:  # end the chunk after a newline
            nl = data.rfind(b"\n", start, end)
            end = nl + 1 if nl >= start else (data.find(b"\n", end) + 1 or n)
        a = arr[start:end]
        ends = np.flatnonzero(a == 10)
        if len(ends) == 0 or ends[-1] != len(a) - 1:
            ends = np.r_[ends, len(a)]  # the last line has no newline
        per_line = np.diff(np.r_[0, np.searchsorted(np.flatnonzero(a == s), ends)])
        bad = np.flatnonzero(per_line != nfields - 1)
        bad = bad[bad + base >= skip]
        if len(bad):
            return int(bad[0]) + base + 1
        base += len(ends)
        start = end
    return None


def _parse_ratings(data: bytes, fname: str, *, sep: str, header: bool, rating_range: Tuple[float, float],
                   atomic: bool = False) -> pd.DataFrame:
    """Ratings with pandas (fast path); on any problem the first bad line is located for the message."""
    if not data or data.isspace():  # (not data.strip(): a copy of a 500 MB file)
        raise DataFormatError(fname, None, "the file is empty")
    if sep == "::":  # the C parser wants a one-character separator
        if b"\x1f" in data:
            raise DataFormatError(fname, None, "unexpected control character \\x1f")
        data, sep = data.replace(b"::", b"\x1f"), "\x1f"
    first_nl = data.find(b"\n")
    first = data[: first_nl if first_nl >= 0 else len(data)].decode("latin-1").rstrip("\r")
    if header:
        head = _atomic_header(first, fname) if atomic else first.split(sep)
        want = ("user_id", "item_id", "rating", "timestamp") if atomic else ("userId", "movieId", "rating", "timestamp")
        if any(n not in head for n in want):
            raise DataFormatError(fname, 1, f"the header must name {', '.join(want)}; got {first!r}")
        cols, nfields = [head.index(n) for n in want], len(head)
    else:
        cols, nfields = [0, 1, 2, 3], 4
        _fields(first.split(sep), nfields, fname, 1)
    nh = int(header)
    lo, hi = rating_range

    def slow(default: str):
        for k, line in enumerate(_lines_latin1(data)[nh:], nh + 1):
            _check_rating_line(line, k, fname, sep, nfields, cols, rating_range)
        raise DataFormatError(fname, None, default)

    bad_line = _first_bad_field_count(data, sep, nfields, nh)
    if bad_line is not None:
        _check_rating_line(_lines_latin1(data)[bad_line - 1], bad_line, fname, sep, nfields, cols, rating_range)
        raise DataFormatError(fname, bad_line, "malformed line")
    n_lines = data.count(b"\n") + (0 if data.endswith(b"\n") else 1) - nh
    read = functools.partial(pd.read_csv, sep=sep, header=None, skiprows=nh, usecols=cols, quoting=csv.QUOTE_NONE,
                             engine="c")
    try:  # fast path: integer ids and timestamps parsed as such (no float copy of 20M rows, no integer check)
        df = read(io.BytesIO(data), dtype={c: (np.float64 if c == cols[2] else np.int64) for c in cols})
    except (ValueError, OverflowError, pd.errors.ParserError):
        df = None  # a non-integer or missing field somewhere: the float path below accepts "5.0" and finds the line
    if df is not None and len(df) == n_lines:
        r = df[cols[2]].to_numpy()
        bad = ~(np.isfinite(r) & (r >= lo) & (r <= hi))
        if not bad.any():
            out = pd.DataFrame({"user_id": df[cols[0]].to_numpy(np.int64), "item_id": df[cols[1]].to_numpy(np.int64),
                                "rating": r.astype(np.float32), "timestamp": df[cols[3]].to_numpy(np.int64)},
                               copy=False)
            out.attrs["header_lines"] = nh
            return out
    del df
    try:
        df = read(io.BytesIO(data), dtype={c: np.float64 for c in cols})
    except (ValueError, pd.errors.ParserError) as e:
        slow(f"could not parse ({e})")
    if len(df) != n_lines:
        slow("blank lines in the file")
    arr = df[cols].to_numpy()
    bad = ~np.isfinite(arr).all(axis=1)
    bad |= ~(np.floor(arr[:, [0, 1, 3]]) == arr[:, [0, 1, 3]]).all(axis=1)
    bad |= ~((arr[:, 2] >= lo) & (arr[:, 2] <= hi))
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        line = _lines_latin1(data)[r + nh]
        _check_rating_line(line, r + nh + 1, fname, sep, nfields, cols, rating_range)
        raise DataFormatError(fname, r + nh + 1, f"malformed line {line!r}")
    out = pd.DataFrame({"user_id": arr[:, 0].astype(np.int64), "item_id": arr[:, 1].astype(np.int64),
                        "rating": arr[:, 2].astype(np.float32), "timestamp": arr[:, 3].astype(np.int64)})
    out.attrs["header_lines"] = nh
    return out


def _has_duplicate_pairs(users: np.ndarray, items: np.ndarray) -> bool:
    """Whether a ``(user, item)`` pair occurs twice: one sort of an int64 key (no hash table of 20M pairs)."""
    if len(users) < 2:
        return False
    u0, i0 = int(users.min()), int(items.min())
    span_u, span_i = int(users.max()) - u0 + 1, int(items.max()) - i0 + 1
    if span_u * span_i >= 2 ** 62:  # ids too large for one key: let pandas hash the pairs
        return True
    key = (users.astype(np.int64) - u0) * span_i + (items.astype(np.int64) - i0)
    key.sort()
    return bool((key[1:] == key[:-1]).any())


def _check_ratings(ratings: pd.DataFrame, items: pd.DataFrame, users: Optional[pd.DataFrame], fname: str) -> None:
    """Unknown item / user ids and duplicate (user, item) pairs, with the line of the first offence."""
    nh = ratings.attrs.get("header_lines", 0)
    for col, table, what in (("item_id", items, "item"), ("user_id", users, "user")):
        if table is None:
            continue
        unknown = ~np.isin(ratings[col].to_numpy(), table[col].to_numpy())
        if unknown.any():
            r = int(np.flatnonzero(unknown)[0])
            raise DataFormatError(fname, r + nh + 1, f"unknown {what} id {int(ratings[col].iat[r])} "
                                                     f"(not in the {what}s file)")
    if not _has_duplicate_pairs(ratings["user_id"].to_numpy(), ratings["item_id"].to_numpy()):
        return
    dup = ratings.duplicated(["user_id", "item_id"]).to_numpy()
    if dup.any():
        r = int(np.flatnonzero(dup)[0])
        raise DataFormatError(fname, r + nh + 1, f"second rating of item {int(ratings['item_id'].iat[r])} by user "
                                                 f"{int(ratings['user_id'].iat[r])}")


def _read_directory(directory: Path, variant: str, layout: Tuple[str, str], source: str,
                    expected: Optional[Dict[str, str]] = None) -> MovieLens:
    """Parse the variant's files in ``directory`` (``layout`` from :func:`_detect_layout`)."""
    files: Dict[str, str] = {}
    rr = _RATING_RANGE[variant]
    kind, name = layout
    rel = str
    if kind == "atomic":
        p_r, p_i, p_u = (directory / f"{name}.{ext}" for ext in ("inter", "item", "user"))
        d_r, d_i = _read(p_r, files, expected), _read(p_i, files, expected)
        d_u = _read(p_u, files, expected) if p_u.is_file() or (expected and p_u.name in expected) else None
        items = _parse_atomic_item(d_i, rel(p_i))
        users = _parse_atomic_user(d_u, rel(p_u)) if d_u is not None else None
        ratings = _parse_ratings(d_r, rel(p_r), sep="\t", header=True, rating_range=rr, atomic=True)
    else:
        f_r, f_i, f_u = _GROUPLENS_FILES[variant]
        p_r, p_i = directory / f_r, directory / f_i
        d_r, d_i = _read(p_r, files, expected), _read(p_i, files, expected)
        d_u = _read(directory / f_u, files, expected) if f_u else None
        if variant == "ml-100k":
            genre_names = list(ML100K_GENRE_FLAGS)
            p_g = directory / "u.genre"
            if p_g.is_file():
                genre_names = _parse_u_genre(_read(p_g, files, expected), rel(p_g))
            items = _parse_u_item(d_i, rel(p_i), genre_names)
            users = _parse_u_user(d_u, rel(directory / f_u))
            ratings = _parse_ratings(d_r, rel(p_r), sep="\t", header=False, rating_range=rr)
        elif variant == "ml-1m":
            items = _parse_movies_dat(d_i, rel(p_i))
            users = _parse_users_dat(d_u, rel(directory / f_u))
            ratings = _parse_ratings(d_r, rel(p_r), sep="::", header=False, rating_range=rr)
        else:
            items = _parse_movies_csv(d_i, rel(p_i))
            users = None
            ratings = _parse_ratings(d_r, rel(p_r), sep=",", header=True, rating_range=rr)
    _check_ratings(ratings, items, users, rel(p_r))
    ratings.attrs = {}
    if users is None:
        users = pd.DataFrame({"user_id": np.sort(pd.unique(ratings["user_id"].to_numpy())).astype(np.int64)})
    genres = sorted({g for gs in items["genres"] for g in gs})
    return MovieLens(variant=variant, ratings=ratings.reset_index(drop=True), items=items, users=users,
                     genres=genres, source=source, files=files)


# --------------------------------------------------------------------------------------------------- sources

def _download_grouplens(variant: str, dest: Path) -> None:
    """Download the GroupLens archive of ``variant`` to the file ``dest`` (network; replaced in tests)."""
    url = GROUPLENS_URL.format(variant=variant)
    req = urllib.request.Request(url, headers={"User-Agent": "torchfair"})
    with urllib.request.urlopen(req, timeout=_DOWNLOAD_TIMEOUT) as r, open(dest, "wb") as f:
        while True:
            chunk = r.read(1 << 20)
            if not chunk:
                break
            f.write(chunk)


def _fetch_recbole_wheel(dest: Path) -> Path:
    """``pip download`` the recbole wheel (no dependencies, never installed) into the folder ``dest``."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"recbole=={RECBOLE_VERSION}", "-d", str(dest), "-q", "--disable-pip-version-check"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=_PIP_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise OSError(f"pip download timed out after {_PIP_TIMEOUT:g} s") from None
    if r.returncode != 0:
        tail = (r.stderr or r.stdout).strip().splitlines()[-3:]
        raise OSError(f"pip download exited with {r.returncode}: {' | '.join(tail)}")
    path = dest / _RECBOLE_WHEEL
    if not path.is_file():
        raise OSError(f"pip download did not write {_RECBOLE_WHEEL}")
    return path


def _write_atomically(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".part{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _write_manifest(directory: Path, source: str, files: Dict[str, str]) -> None:
    _write_atomically(directory / _MANIFEST, json.dumps({"source": source, "files": files}, indent=1).encode())


def _read_manifest(directory: Path) -> Optional[dict]:
    p = directory / _MANIFEST
    if not p.is_file():
        return None
    try:
        m = json.loads(p.read_text())
        return m if isinstance(m, dict) and isinstance(m.get("files"), dict) else None
    except (OSError, ValueError):
        return None


def _say(verbose: bool, msg: str) -> None:
    if verbose:
        print(f"torchfair: {msg}", file=sys.stderr, flush=True)


def _from_grouplens(variant: str, cache: Path, verbose: bool) -> Path:
    """Download, verify and extract the GroupLens archive into ``cache``; returns ``cache/variant``."""
    url = GROUPLENS_URL.format(variant=variant)
    cache.mkdir(parents=True, exist_ok=True)
    archive = cache / f"{variant}.zip.part{os.getpid()}"
    _say(verbose, f"downloading {url}")
    try:
        _download_grouplens(variant, archive)
    except Exception as e:  # network errors of every kind: the next source is tried
        archive.unlink(missing_ok=True)
        raise _SourceFailed(f"{type(e).__name__}: {e}") from None
    algorithm, expected = _ARCHIVE_CHECKSUMS[variant]
    actual = _file_digest(archive, algorithm)
    if actual != expected:
        archive.unlink(missing_ok=True)
        raise ChecksumError(f"{variant}.zip (from {url})", algorithm, expected, actual)
    target = cache / variant
    target.mkdir(parents=True, exist_ok=True)
    hashes: Dict[str, str] = {}
    try:
        with zipfile.ZipFile(archive) as z:
            for info in z.infolist():
                parts = Path(info.filename).parts
                if info.is_dir() or len(parts) != 2 or parts[0] != variant or parts[1] in ("..", "."):
                    continue  # only the files of the variant's folder, never a path outside it
                data = z.read(info)
                _write_atomically(target / parts[1], data)
                hashes[parts[1]] = _digest(data, "sha256")
    except zipfile.BadZipFile as e:
        raise _SourceFailed(f"bad zip archive: {e}") from None
    finally:
        archive.unlink(missing_ok=True)
    _write_manifest(target, f"GroupLens archive {url} ({algorithm} verified)", hashes)
    return target


def _from_recbole(cache: Path, verbose: bool, network: bool) -> Path:
    """ML-100K atomic files out of the recbole wheel (fetched unless already in ``cache/wheels``)."""
    wheels = cache / "wheels"
    whl = wheels / _RECBOLE_WHEEL
    if not whl.is_file():
        if not network:
            raise _SourceFailed("not in the cache and network sources are off")
        wheels.mkdir(parents=True, exist_ok=True)
        _say(verbose, f"fetching recbole=={RECBOLE_VERSION} with pip download (the wheel is read, not installed)")
        try:
            whl = _fetch_recbole_wheel(wheels)
        except Exception as e:
            raise _SourceFailed(f"{type(e).__name__}: {e}") from None
    actual = _file_digest(whl, "sha256")
    if actual != _RECBOLE_WHEEL_SHA256:
        raise ChecksumError(str(whl), "sha256", _RECBOLE_WHEEL_SHA256, actual, "delete it to fetch it again")
    target = cache / "ml-100k"
    target.mkdir(parents=True, exist_ok=True)
    try:
        with zipfile.ZipFile(whl) as z:
            blobs = {n: z.read(_RECBOLE_MEMBER.format(name=n)) for n in _RECBOLE_SHA256}
    except (zipfile.BadZipFile, KeyError) as e:
        raise _SourceFailed(f"cannot read the ML-100K files from {whl.name}: {e}") from None
    for n, data in blobs.items():
        sha = _digest(data, "sha256")
        if sha != _RECBOLE_SHA256[n]:
            raise ChecksumError(f"{n} in {whl}", "sha256", _RECBOLE_SHA256[n], sha)
    for n, data in blobs.items():
        _write_atomically(target / n, data)
    _write_manifest(target, f"RecBole {RECBOLE_VERSION} wheel ({_RECBOLE_WHEEL}, sha256 verified)", dict(_RECBOLE_SHA256))
    return target


def _from_cache(directory: Path, variant: str, layout: Tuple[str, str]) -> MovieLens:
    manifest = _read_manifest(directory)
    expected: Dict[str, str] = dict(manifest["files"]) if manifest else {}
    if variant == "ml-100k" and layout == ("atomic", "ml-100k"):
        expected.update(_RECBOLE_SHA256)  # the RecBole files are always checked against the recorded hashes
    how = manifest["source"] if manifest and isinstance(manifest.get("source"), str) else \
        "placed by hand, not checksummed"
    return _read_directory(directory, variant, layout, f"cache {directory} ({how})", expected or None)


def load_movielens(variant: str = "ml-100k", root: Optional[str] = None, *, cache_dir: Optional[str] = None,
                   download: bool = True, verbose: bool = True) -> MovieLens:
    """Load a MovieLens variant (module doc: sources, checks, frames).

    ``variant``: one of :data:`VARIANTS`; ``root``: a directory with the files (skips the cache and the network);
    ``cache_dir``: the cache (default :func:`default_cache_dir`); ``download``: allow the network sources;
    ``verbose``: say on stderr what is downloaded.  Raises :class:`DataFormatError` / :class:`ChecksumError`
    (both ``ValueError``) or :class:`DataUnavailableError` (a ``RuntimeError``).

    Example (with the files at hand)::

        ml = load_movielens("ml-100k")          # 100000 ratings, 943 users, 1682 items
        ml.ratings.groupby("user_id").size()
    """
    if not isinstance(variant, str) or variant not in VARIANTS:
        raise ValueError(f"`variant` must be one of {', '.join(repr(v) for v in VARIANTS)}; got {variant!r}")
    for name, val in (("download", download), ("verbose", verbose)):
        if not isinstance(val, bool):
            raise ValueError(f"`{name}` must be a bool; got {val!r}")
    if root is not None:
        if not isinstance(root, (str, os.PathLike)):
            raise ValueError(f"`root` must be a path; got {root!r}")
        base = Path(os.path.expanduser(os.fspath(root)))
        for d in (base, base / variant):
            layout = _detect_layout(d, variant)
            if layout is not None:
                kind = "GroupLens layout" if layout[0] == "grouplens" else "RecBole atomic files"
                return _read_directory(d, variant, layout, f"root {d} ({kind}, not checksummed)")
        raise DataUnavailableError(f"`root` {base} holds no MovieLens {variant!r} files (nor does {base / variant}); "
                                   f"expected {_expected_names(variant)}", [(f"root {base}", "no files")])
    if cache_dir is not None and not isinstance(cache_dir, (str, os.PathLike)):
        raise ValueError(f"`cache_dir` must be a path; got {cache_dir!r}")
    cache = Path(os.path.expanduser(os.fspath(cache_dir))) if cache_dir is not None else default_cache_dir()
    directory = cache / variant
    attempts: List[Tuple[str, str]] = []
    layout = _detect_layout(directory, variant)
    if layout is not None:
        return _from_cache(directory, variant, layout)
    attempts.append((f"cache {directory}", "no MovieLens files there"))
    network = download and not _offline()
    why_not = "download=False" if not download else "TORCHFAIR_OFFLINE is set"
    url = GROUPLENS_URL.format(variant=variant)
    if network:
        try:
            d = _from_grouplens(variant, cache, verbose)
            return _from_cache(d, variant, _detect_layout(d, variant) or ("grouplens", ""))
        except _SourceFailed as e:
            attempts.append((f"GroupLens archive {url}", str(e)))
    else:
        attempts.append((f"GroupLens archive {url}", f"skipped ({why_not})"))
    if variant == "ml-100k":
        try:
            d = _from_recbole(cache, verbose, network)
            return _from_cache(d, variant, ("atomic", "ml-100k"))
        except _SourceFailed as e:
            reason = str(e) if network else f"{e} ({why_not})"
            attempts.append((f"RecBole {RECBOLE_VERSION} wheel (pip download recbole=={RECBOLE_VERSION}, "
                             f"cached in {cache / 'wheels'})", reason))
    listing = "\n".join(f"  {k}. {src}: {why}" for k, (src, why) in enumerate(attempts, 1))
    raise DataUnavailableError(
        f"could not load MovieLens {variant!r}; tried:\n{listing}\n"
        f"Put {_expected_names(variant)} into {directory} by hand, or pass `root=` a directory holding them.",
        attempts)


# --------------------------------------------------------------------------------------------------- synthetic

_SYNTH_GENRES = ("Action", "Comedy", "Drama", "Romance", "Thriller", "Horror", "Sci-Fi", "Documentary")
_SYNTH_OCCUPATIONS = ("student", "engineer", "educator", "artist", "other")


def synthetic_movielens(n_users: int = 60, n_items: int = 80, seed: int = 0, *, n_genres: int = 3,
                        ratings_per_user: Tuple[int, int] = (20, 40)) -> MovieLens:
    """A small deterministic fake MovieLens (ML-100K structure) from ``seed``: no network, for tests and smoke runs.

    Items ``1..n_items`` with a popularity skew (log-normal), 1-2 of ``n_genres`` genres (some items none) and a
    release year (one in ten unknown); users ``1..n_users`` with ``age``, ``gender``, ``occupation``, ``zip_code``
    rate between ``ratings_per_user`` items (capped at ``n_items``) drawn by popularity, on a 1-5 scale driven by
    user and item biases, at increasing integer timestamps (with some ties)."""
    for name, v, lo in (("n_users", n_users, 1), ("n_items", n_items, 2), ("seed", seed, 0), ("n_genres", n_genres, 1)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
            raise ValueError(f"`{name}` must be an int >= {lo}; got {v!r}")
    if n_genres > len(_SYNTH_GENRES):
        raise ValueError(f"`n_genres` must be <= {len(_SYNTH_GENRES)}; got {n_genres}")
    if (not isinstance(ratings_per_user, (tuple, list)) or len(ratings_per_user) != 2
            or not 1 <= ratings_per_user[0] <= ratings_per_user[1]):
        raise ValueError(f"`ratings_per_user` must be (low, high) with 1 <= low <= high; got {ratings_per_user!r}")
    rng = np.random.default_rng([int(seed), 20240917])
    genre_names = sorted(_SYNTH_GENRES[:n_genres])
    pop = rng.lognormal(0.0, 1.0, n_items)
    pop /= pop.sum()
    item_bias = rng.normal(0.0, 0.6, n_items)
    genres, years = [], []
    for i in range(n_items):
        k = int(rng.integers(0, 3)) if n_genres > 1 else int(rng.integers(0, 2))
        gs = sorted(rng.choice(n_genres, size=min(k, n_genres), replace=False).tolist())
        genres.append([genre_names[g] for g in gs])
        years.append(None if rng.random() < 0.1 else int(rng.integers(1950, 2000)))
    items = pd.DataFrame({"item_id": np.arange(1, n_items + 1, dtype=np.int64),
                          "title": pd.Series([f"Movie {i}" for i in range(1, n_items + 1)], dtype=object),
                          "year": pd.array(years, dtype="Int64"), "genres": pd.Series(genres, dtype=object)})
    users = pd.DataFrame({"user_id": np.arange(1, n_users + 1, dtype=np.int64),
                          "age": rng.integers(12, 70, n_users).astype(np.int64),
                          "gender": pd.Series(rng.choice(["F", "M"], n_users), dtype=object),
                          "occupation": pd.Series(rng.choice(_SYNTH_OCCUPATIONS, n_users), dtype=object),
                          "zip_code": pd.Series([f"{z:05d}" for z in rng.integers(0, 100000, n_users)],
                                                dtype=object)})
    lo, hi = min(ratings_per_user[0], n_items), min(ratings_per_user[1], n_items)
    rows_u, rows_i, rows_r, rows_t = [], [], [], []
    for u in range(n_users):
        n = int(rng.integers(lo, hi + 1))
        its = rng.choice(n_items, size=n, replace=False, p=pop)
        bias = rng.normal(0.0, 0.5)
        r = np.clip(np.rint(3.5 + bias + item_bias[its] + rng.normal(0.0, 0.7, n)), 1, 5)
        t0 = 880_000_000 + int(rng.integers(0, 5_000_000))
        ts = t0 + np.cumsum(rng.integers(0, 4, n) * 60)  # steps of 0 make timestamp ties
        rows_u.append(np.full(n, u + 1))
        rows_i.append(its + 1)
        rows_r.append(r)
        rows_t.append(ts)
    ratings = pd.DataFrame({"user_id": np.concatenate(rows_u).astype(np.int64),
                            "item_id": np.concatenate(rows_i).astype(np.int64),
                            "rating": np.concatenate(rows_r).astype(np.float32),
                            "timestamp": np.concatenate(rows_t).astype(np.int64)})
    return MovieLens(variant="synthetic", ratings=ratings, items=items, users=users,
                     genres=list(genre_names), source=f"synthetic_movielens(seed={seed})",
                     files={})
