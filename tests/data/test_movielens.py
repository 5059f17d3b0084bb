"""MovieLens loaders: every file format on small hand-written files, the sources (cache, GroupLens archive, RecBole
wheel) with their checksums, strict parsing errors, the no-source error; the real ML-100K (network, slow)."""
import hashlib
import io
import json
import os
import zipfile

import numpy as np
import pandas as pd
import pytest

# torchfair.data.movielens is imported when a test runs, not when the file is collected (fixture `M`): Hypothesis
# draws examples from the constants of the local modules loaded so far, so loading this module during collection
# would change the examples of the (derandomized) contract tests that run before these.
_ORIGINAL = {}

# the 19 genre flags of ML-100K's u.item, written out here as the reference
FLAGS = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
         "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western"]


def flags(*genres):
    return "|".join("1" if g in genres else "0" for g in FLAGS)


TOY_FLAGS = flags("Animation", "Children's", "Comedy")
U_ITEM = "\n".join([
    f"1|Toy Story (1995)|01-Jan-1995||http://us.imdb.com/M/title-exact?Toy%20Story%20(1995)|{TOY_FLAGS}",
    f"2|GoldenEye (1995)|01-Jan-1995||http://x|{flags('Action', 'Adventure', 'Thriller')}",
    f"3|Café Society (1997)|01-Jan-1997||http://x|{flags('Drama')}",
    f"267|unknown||||{flags('unknown')}",
    f"5|No Year In Title|05-Jun-1993||http://x|{flags('Comedy')}",
]) + "\n"
U_USER = "1|24|M|technician|85711\n2|53|F|other|94043\n3|17|M|student|12345\n"
U_DATA = "1\t1\t5\t881250949\n1\t2\t3\t881250950\n2\t1\t4\t891717742\n3\t267\t1\t878887116\n2\t3\t2\t891717743\n"


def write_100k(d, data=U_DATA, item=U_ITEM, user=U_USER):
    d.mkdir(parents=True, exist_ok=True)
    (d / "u.data").write_text(data)
    (d / "u.item").write_bytes(item.encode("latin-1"))
    (d / "u.user").write_text(user)
    return d


ATOMIC_INTER = ("timestamp:float\tuser_id:token\titem_id:token\trating:float\n"  # columns permuted on purpose
                "881250949\t196\t242\t3\n891717742\t186\t302\t3\n878887116\t196\t302\t1\n")
ATOMIC_ITEM = ("item_id:token\tmovie_title:token_seq\trelease_year:token\tclass:token_seq\n"
               "242\tKolya\t1996\tComedy\n"
               "302\tL.A. Confidential\t1997\tCrime Film-Noir Mystery Thriller\n"
               "1412\tLand Before Time III: The Time of the Great Giving (1995)\tV\tAnimation Children's\n"
               "267\tunkonwn\tunkonwn\tunknown\n")
ATOMIC_USER = ("user_id:token\tage:token\tgender:token\toccupation:token\tzip_code:token\n"
               "196\t49\tM\twriter\t55105\n186\t39\tF\texecutive\t00000\n")


def write_atomic(d, name="ml-100k", inter=ATOMIC_INTER, item=ATOMIC_ITEM, user=ATOMIC_USER):
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{name}.inter").write_text(inter)
    (d / f"{name}.item").write_text(item)
    if user is not None:
        (d / f"{name}.user").write_text(user)
    return d


@pytest.fixture
def M():
    """The module under test (see the note at the top)."""
    import torchfair.data.movielens as mod
    if not _ORIGINAL:
        _ORIGINAL.update(fetch=mod._fetch_recbole_wheel, recbole_sha256=dict(mod._RECBOLE_SHA256))
    return mod


@pytest.fixture(autouse=True)
def _no_network(monkeypatch, M):
    """No test here reaches the network unless it says so."""
    def refuse(*a, **k):
        raise OSError("network disabled in tests")
    monkeypatch.setattr(M, "_download_grouplens", refuse)
    monkeypatch.setattr(M, "_fetch_recbole_wheel", refuse)
    monkeypatch.delenv("TORCHFAIR_OFFLINE", raising=False)
    monkeypatch.delenv("TORCHFAIR_DATA", raising=False)


# ----------------------------------------------------------------------------------------------- formats

def test_grouplens_100k(tmp_path, M):
    ml = M.load_movielens("ml-100k", root=str(write_100k(tmp_path / "d")), verbose=False)
    assert ml.variant == "ml-100k" and "root" in ml.source
    r = ml.ratings
    assert list(r.columns) == ["user_id", "item_id", "rating", "timestamp"]
    assert [str(t) for t in r.dtypes] == ["int64", "int64", "float32", "int64"]
    assert r.values.tolist() == [[1, 1, 5, 881250949], [1, 2, 3, 881250950], [2, 1, 4, 891717742],
                                 [3, 267, 1, 878887116], [2, 3, 2, 891717743]]
    it = ml.items
    assert it["item_id"].tolist() == [1, 2, 3, 5, 267]
    assert it["title"].tolist() == ["Toy Story", "GoldenEye", "Café Society", "No Year In Title", "unknown"]
    assert str(it["year"].dtype) == "Int64"
    assert it["year"].tolist()[:4] == [1995, 1995, 1997, 1993] and pd.isna(it["year"].iloc[4])
    assert it["genres"].tolist() == [["Animation", "Children's", "Comedy"], ["Action", "Adventure", "Thriller"],
                                     ["Drama"], ["Comedy"], []]
    assert ml.genres == ["Action", "Adventure", "Animation", "Children's", "Comedy", "Drama", "Thriller"]
    u = ml.users
    assert u.values.tolist() == [[1, 24, "M", "technician", "85711"], [2, 53, "F", "other", "94043"],
                                 [3, 17, "M", "student", "12345"]]
    assert list(u.columns) == ["user_id", "age", "gender", "occupation", "zip_code"]
    assert ml.files["u.data"] == hashlib.sha256(U_DATA.encode()).hexdigest()
    assert set(ml.files) == {"u.data", "u.item", "u.user"}


def test_u_genre_is_used_when_present(tmp_path, M):
    d = write_100k(tmp_path)
    (d / "u.genre").write_text("".join(f"{g}|{k}\n" for k, g in enumerate(FLAGS)) + "\n")  # ends blank, as GroupLens
    assert M.load_movielens("ml-100k", root=str(d)).items["genres"].iloc[1] == ["Action", "Adventure", "Thriller"]
    (d / "u.genre").write_text("Action|0\n")
    with pytest.raises(M.DataFormatError, match="u.item, line 1: expected 6 fields"):
        M.load_movielens("ml-100k", root=str(d))


def test_grouplens_1m(tmp_path, M):
    d = tmp_path / "ml-1m"  # root may name the parent of the variant's folder
    d.mkdir()
    (d / "movies.dat").write_bytes("1::Toy Story (1995)::Animation|Children's|Comedy\n"
                                   "11::American President, The (1995)::Comedy|Drama|Romance\n"
                                   "3::Shanghai Triad (Yao a yao yao dao waipo qiao) (1995)::Drama\n".encode("latin-1"))
    (d / "users.dat").write_text("1::F::1::10::48067\n2::M::56::16::70072\n")
    (d / "ratings.dat").write_text("1::1193::5::978300760\n".replace("1193", "11") + "2::1::3::978302109\n")
    ml = M.load_movielens("ml-1m", root=str(tmp_path))
    assert ml.items["title"].tolist() == ["Toy Story", "Shanghai Triad (Yao a yao yao dao waipo qiao)",
                                          "American President, The"]
    assert ml.items["year"].tolist() == [1995, 1995, 1995]
    assert ml.items["genres"].tolist() == [["Animation", "Children's", "Comedy"], ["Drama"],
                                           ["Comedy", "Drama", "Romance"]]
    assert ml.users.values.tolist() == [[1, 1, "F", 10, "48067"], [2, 56, "M", 16, "70072"]]
    assert ml.ratings.values.tolist() == [[1, 11, 5, 978300760], [2, 1, 3, 978302109]]


@pytest.mark.parametrize("variant", ["ml-latest-small", "ml-20m", "ml-25m"])
def test_csv_variants(tmp_path, variant, M):
    (tmp_path / "movies.csv").write_text(
        "movieId,title,genres\n1,Toy Story (1995),Adventure|Animation|Children|Comedy|Fantasy\n"
        '11,"American President, The (1995)",Comedy|Drama|Romance\n'
        "7,Some Film,(no genres listed)\n"
        '8,"Film ""Quoted"" (2003) ",Drama\n')
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,1,4.0,964982703\n1,11,0.5,964981247\n"
                                          "5,7,3.5,964982224\n")
    ml = M.load_movielens(variant, root=str(tmp_path))
    assert ml.items["item_id"].tolist() == [1, 7, 8, 11]
    assert ml.items["title"].tolist() == ["Toy Story", "Some Film", 'Film "Quoted"', "American President, The"]
    assert ml.items["year"].tolist()[0] == 1995 and pd.isna(ml.items["year"].iloc[1])
    assert ml.items["year"].tolist()[2:] == [2003, 1995]
    assert ml.items["genres"].tolist()[:2] == [["Adventure", "Animation", "Children", "Comedy", "Fantasy"], []]
    assert ml.users.values.tolist() == [[1], [5]] and list(ml.users.columns) == ["user_id"]
    assert ml.ratings["rating"].tolist() == [4.0, 0.5, 3.5]


def test_atomic_files_mapped_by_header_name(tmp_path, M):
    ml = M.load_movielens("ml-100k", root=str(write_atomic(tmp_path)))
    assert "atomic" in ml.source
    assert ml.ratings.values.tolist() == [[196, 242, 3, 881250949], [186, 302, 3, 891717742],
                                          [196, 302, 1, 878887116]]
    it = ml.items.set_index("item_id")
    assert it.loc[242, "title"] == "Kolya" and it.loc[242, "year"] == 1996
    assert it.loc[302, "genres"] == ["Crime", "Film-Noir", "Mystery", "Thriller"]
    # RecBole's quirks: item 1412 has year "V" (the year is in the title), item 267 has no genre
    assert it.loc[1412, "title"] == "Land Before Time III: The Time of the Great Giving" and it.loc[1412, "year"] == 1995
    assert it.loc[1412, "genres"] == ["Animation", "Children's"]
    assert it.loc[267, "genres"] == [] and pd.isna(it.loc[267, "year"])
    assert ml.users.values.tolist() == [[186, 39, "F", "executive", "00000"], [196, 49, "M", "writer", "55105"]]


def test_atomic_other_name_and_no_user_file(tmp_path, M):
    write_atomic(tmp_path, name="my-movies", user=None)
    ml = M.load_movielens("ml-100k", root=str(tmp_path))
    assert ml.users["user_id"].tolist() == [186, 196] and list(ml.users.columns) == ["user_id"]


def test_root_without_files(tmp_path, M):
    (tmp_path / "README").write_text("nothing")
    with pytest.raises(M.DataUnavailableError, match="u.data, u.item, u.user"):
        M.load_movielens("ml-100k", root=str(tmp_path))


def test_argument_validation(tmp_path, M):
    with pytest.raises(ValueError, match="`variant`"):
        M.load_movielens("ml-10m")
    with pytest.raises(ValueError, match="`download`"):
        M.load_movielens("ml-100k", cache_dir=str(tmp_path), download=1)


# ----------------------------------------------------------------------------------------------- strict parsing

@pytest.mark.parametrize("data, line, msg", [
    ("1\t1\t5\t881250949\n1\t2\t3\n", 2, "expected 4 fields, found 3"),
    ("1\t1\t5\t881250949\n1\t2\t3\t5\t9\n", 2, "expected 4 fields, found 5"),
    ("1\t1\t5\t881250949\n1\t2\t3\t5\t9\n", 2, "expected 4 fields"),
    ("1\t1\t5\t881250949\n1\t2\tgood\t881250950\n", 2, "rating must be a number; got 'good'"),
    ("1\t1\t5\t881250949\n1\t2\tnan\t881250950\n", 2, "rating must be finite"),
    ("1\t1\t5\t881250949\n1\t2\t3\t8812509.5\n", 2, "timestamp must be an integer"),
    ("1\t1\t5\t881250949\n1\t2\t3\t881250950\n2\t1\t9\t1\n", 3, "rating 9 outside \\[1, 5\\]"),
    ("1\t1\t5\t881250949\n1\t99\t3\t881250950\n", 2, "unknown item id 99"),
    ("1\t1\t5\t881250949\n7\t1\t3\t881250950\n", 2, "unknown user id 7"),
    ("1\t1\t5\t881250949\n2\t2\t3\t1\n1\t1\t4\t881250950\n", 3, "second rating of item 1 by user 1"),
    ("1\t1\t5\t881250949\n\n1\t2\t4\t881250950\n", 2, "empty line"),
    ("1\t1\t5\n1\t2\t3\t1\n", 1, "expected 4 fields"),
])
def test_corrupt_ratings_name_file_and_line(tmp_path, data, line, msg, M):
    d = write_100k(tmp_path, data=data)
    with pytest.raises(M.DataFormatError, match=msg) as e:
        M.load_movielens("ml-100k", root=str(d))
    assert e.value.line == line and e.value.file.endswith("u.data")
    assert f"u.data, line {line}:" in str(e.value)
    assert isinstance(e.value, ValueError)


def test_corrupt_items_and_users(tmp_path, M):
    d = write_100k(tmp_path / "a", item=U_ITEM.replace("2|GoldenEye (1995)|01-Jan-1995||", "2|GoldenEye|"))
    with pytest.raises(M.DataFormatError, match="expected 24 fields, found 22") as e:
        M.load_movielens("ml-100k", root=str(d))
    assert e.value.file.endswith("u.item") and e.value.line == 2
    d = write_100k(tmp_path / "b", user=U_USER.replace("53", "fifty"))
    with pytest.raises(M.DataFormatError, match=r"u.user, line 2: the age must be an integer; got 'fifty'"):
        M.load_movielens("ml-100k", root=str(d))
    d = write_100k(tmp_path / "c", item=U_ITEM + f"2|Again (1990)|||x|{flags('Drama')}\n")
    with pytest.raises(M.DataFormatError, match="u.item, line 6: duplicate item id 2"):
        M.load_movielens("ml-100k", root=str(d))
    d = write_100k(tmp_path / "d")
    (d / "u.user").unlink()
    with pytest.raises(M.DataFormatError, match="u.user: file not found"):
        M.load_movielens("ml-100k", root=str(d))
    d = write_atomic(tmp_path / "e", item=ATOMIC_ITEM.replace("242\tKolya\t1996\tComedy", "242\tKolya\t1996"))
    with pytest.raises(M.DataFormatError, match="ml-100k.item, line 2: expected 4 fields, found 3"):
        M.load_movielens("ml-100k", root=str(d))
    d = write_atomic(tmp_path / "f", inter=ATOMIC_INTER.replace("891717742\t186\t302\t3", "891717742\t186\t302\tx"))
    with pytest.raises(M.DataFormatError, match="ml-100k.inter, line 3: the rating must be a number"):
        M.load_movielens("ml-100k", root=str(d))


# ----------------------------------------------------------------------------------------------- sources

def test_cache_dir_resolution(monkeypatch, tmp_path, M):
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert M.default_cache_dir() == M.Path(os.path.expanduser("~")) / ".cache" / "torchfair"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert M.default_cache_dir() == tmp_path / "xdg" / "torchfair"
    monkeypatch.setenv("TORCHFAIR_DATA", str(tmp_path / "td"))
    assert M.default_cache_dir() == tmp_path / "td"
    write_100k(tmp_path / "td" / "ml-100k")  # files placed by hand in the cache
    ml = M.load_movielens("ml-100k", download=False)
    assert "placed by hand" in ml.source and len(ml.ratings) == 5


def _zip_bytes(members):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in members.items():
            z.writestr(name, data)
    return buf.getvalue()


def _grouplens_zip():
    return _zip_bytes({"ml-100k/u.data": U_DATA, "ml-100k/u.item": U_ITEM.encode("latin-1"),
                       "ml-100k/u.user": U_USER, "ml-100k/README": "readme", "../evil": "x"})


def test_grouplens_download_verified_and_cached(monkeypatch, tmp_path, M):
    blob = _grouplens_zip()
    calls = []

    def fake_download(variant, dest):
        calls.append(variant)
        dest.write_bytes(blob)
    monkeypatch.setattr(M, "_download_grouplens", fake_download)
    monkeypatch.setitem(M._ARCHIVE_CHECKSUMS, "ml-100k", ("md5", hashlib.md5(blob).hexdigest()))
    ml = M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    assert calls == ["ml-100k"] and "GroupLens archive" in ml.source and len(ml.ratings) == 5
    assert sorted(p.name for p in (tmp_path / "ml-100k").iterdir()) == [".torchfair-source.json", "README", "u.data",
                                                                       "u.item", "u.user"]
    assert not (tmp_path / "evil").exists() and not list(tmp_path.glob("*.zip*"))
    manifest = json.loads((tmp_path / "ml-100k" / ".torchfair-source.json").read_text())
    assert manifest["files"]["u.data"] == hashlib.sha256(U_DATA.encode()).hexdigest()
    # the second load reads the cache (no download) and re-verifies the files against the manifest
    ml2 = M.load_movielens("ml-100k", cache_dir=str(tmp_path))
    assert calls == ["ml-100k"] and ml2.ratings.equals(ml.ratings)
    (tmp_path / "ml-100k" / "u.data").write_text(U_DATA.replace("\t5\t", "\t4\t"))
    with pytest.raises(M.ChecksumError, match="u.data") as e:
        M.load_movielens("ml-100k", cache_dir=str(tmp_path))
    assert e.value.expected == manifest["files"]["u.data"]
    assert e.value.actual == hashlib.sha256(U_DATA.replace("\t5\t", "\t4\t").encode()).hexdigest()


def test_grouplens_archive_checksum_mismatch_is_an_error(monkeypatch, tmp_path, M):
    blob = _grouplens_zip()
    monkeypatch.setattr(M, "_download_grouplens", lambda variant, dest: dest.write_bytes(blob))
    with pytest.raises(M.ChecksumError) as e:
        M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    msg = str(e.value)
    assert "ml-100k.zip" in msg and "0e33842e24a9c977be4e0107933c0723" in msg and hashlib.md5(blob).hexdigest() in msg
    assert isinstance(e.value, ValueError) and not (tmp_path / "ml-100k" / "u.data").exists()


def _fake_wheel(inter=ATOMIC_INTER, item=ATOMIC_ITEM, user=ATOMIC_USER):
    p = "recbole/dataset_example/ml-100k/ml-100k."
    return _zip_bytes({p + "inter": inter, p + "item": item, p + "user": user, "recbole/__init__.py": ""})


def _patch_wheel(M, monkeypatch, blob, calls=None, trust_files=True):
    def fetch(dest):
        if calls is not None:
            calls.append(dest)
        (dest / M._RECBOLE_WHEEL).write_bytes(blob)
        return dest / M._RECBOLE_WHEEL
    monkeypatch.setattr(M, "_fetch_recbole_wheel", fetch)
    monkeypatch.setattr(M, "_RECBOLE_WHEEL_SHA256", hashlib.sha256(blob).hexdigest())
    monkeypatch.setattr(M, "_RECBOLE_SHA256", dict(_ORIGINAL["recbole_sha256"]) if not trust_files else {
        f"ml-100k.{ext}": hashlib.sha256(data.encode()).hexdigest()
        for ext, data in (("inter", ATOMIC_INTER), ("item", ATOMIC_ITEM), ("user", ATOMIC_USER))})


def test_recbole_wheel_fallback_verified_cached_reused(monkeypatch, tmp_path, M):
    calls = []
    _patch_wheel(M, monkeypatch, _fake_wheel(), calls)
    ml = M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    assert len(calls) == 1 and "RecBole 1.2.1 wheel" in ml.source and len(ml.ratings) == 3
    assert (tmp_path / "wheels" / "recbole-1.2.1-py3-none-any.whl").is_file()
    assert {p.name for p in (tmp_path / "ml-100k").iterdir()} >= {"ml-100k.inter", "ml-100k.item", "ml-100k.user"}
    # the extracted files are re-verified at every load
    (tmp_path / "ml-100k" / "ml-100k.user").write_text(ATOMIC_USER.replace("writer", "artist"))
    with pytest.raises(M.ChecksumError, match="ml-100k.user"):
        M.load_movielens("ml-100k", cache_dir=str(tmp_path))
    # with the files gone the wheel in the cache is reused (offline too), not fetched again
    for p in (tmp_path / "ml-100k").iterdir():
        p.unlink()
    monkeypatch.setenv("TORCHFAIR_OFFLINE", "1")
    ml2 = M.load_movielens("ml-100k", cache_dir=str(tmp_path))
    assert len(calls) == 1 and ml2.ratings.equals(ml.ratings)


def test_recbole_wheel_checksum_mismatch(monkeypatch, tmp_path, M):
    blob = _fake_wheel()
    _patch_wheel(M, monkeypatch, blob)
    monkeypatch.setattr(M, "_RECBOLE_WHEEL_SHA256", "9c9948202011f37eb0a7c6768129313f00d6403ad221ec940d5e2d5d5f33a407")
    with pytest.raises(M.ChecksumError, match="recbole-1.2.1-py3-none-any.whl") as e:
        M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    assert "9c99482020" in str(e.value) and hashlib.sha256(blob).hexdigest() in str(e.value)
    # a trusted wheel whose data file differs from the recorded hash (the real recorded hashes)
    tampered = _fake_wheel(inter=ATOMIC_INTER.replace("\t3\n", "\t5\n"))
    (tmp_path / "wheels" / M._RECBOLE_WHEEL).unlink()
    _patch_wheel(M, monkeypatch, tampered, trust_files=False)
    with pytest.raises(M.ChecksumError, match="ml-100k.inter") as e:
        M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    assert "4edb74e2a81178c2ba9ff381495f754f996c4aea351b1272ca36b43da0935eff" in str(e.value)
    assert not (tmp_path / "ml-100k" / "ml-100k.inter").exists()


def test_no_source_lists_every_attempt(tmp_path, M):
    with pytest.raises(M.DataUnavailableError) as e:
        M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    msg = str(e.value)
    assert isinstance(e.value, RuntimeError) and len(e.value.attempts) == 3
    assert "cache" in msg and "GroupLens archive https://files.grouplens.org/datasets/movielens/ml-100k.zip" in msg
    assert "network disabled in tests" in msg and "RecBole 1.2.1 wheel" in msg
    assert str(tmp_path / "ml-100k") in msg and "u.data, u.item, u.user" in msg and "ml-100k.inter" in msg
    with pytest.raises(M.DataUnavailableError) as e:  # other variants have no wheel fallback
        M.load_movielens("ml-1m", cache_dir=str(tmp_path), download=False)
    assert len(e.value.attempts) == 2 and "download=False" in str(e.value) and "ratings.dat" in str(e.value)


def test_offline_env_skips_network(monkeypatch, tmp_path, M):
    calls = []
    monkeypatch.setattr(M, "_download_grouplens", lambda *a: calls.append(a))
    monkeypatch.setenv("TORCHFAIR_OFFLINE", "1")
    with pytest.raises(M.DataUnavailableError, match="TORCHFAIR_OFFLINE"):
        M.load_movielens("ml-latest-small", cache_dir=str(tmp_path))
    assert calls == []


# ----------------------------------------------------------------------------------------------- synthetic

def test_synthetic_movielens(M):
    a, b = M.synthetic_movielens(seed=3), M.synthetic_movielens(seed=3)
    assert a.ratings.equals(b.ratings) and a.items.equals(b.items) and a.users.equals(b.users)
    assert not a.ratings.equals(M.synthetic_movielens(seed=4).ratings)
    assert len(a.users) == 60 and len(a.items) == 80 and a.genres == ["Action", "Comedy", "Drama"]
    r = a.ratings
    assert not r.duplicated(["user_id", "item_id"]).any()
    assert r["rating"].between(1, 5).all() and set(r["item_id"]) <= set(a.items["item_id"])
    assert r.groupby("user_id").size().between(20, 40).all()
    assert [str(t) for t in r.dtypes] == ["int64", "int64", "float32", "int64"]
    assert set(g for gs in a.items["genres"] for g in gs) <= set(a.genres)
    with pytest.raises(ValueError, match="`n_items`"):
        M.synthetic_movielens(n_items=1)


# ----------------------------------------------------------------------------------------------- real data

@pytest.mark.network
@pytest.mark.slow
def test_real_ml100k_through_the_recbole_wheel(tmp_path, monkeypatch, M):
    monkeypatch.setattr(M, "_fetch_recbole_wheel", _ORIGINAL["fetch"])  # the GroupLens download stays refused
    try:
        ml = M.load_movielens("ml-100k", cache_dir=str(tmp_path), verbose=False)
    except M.DataUnavailableError as e:
        pytest.skip(f"package index unreachable: {e}")
    assert "RecBole" in ml.source
    assert len(ml.ratings) == 100_000 and len(ml.users) == 943 and len(ml.items) == 1682
    assert ml.ratings["user_id"].nunique() == 943 and ml.ratings["item_id"].nunique() == 1682
    assert sorted(ml.ratings["rating"].unique().tolist()) == [1, 2, 3, 4, 5]
    assert ml.files == M._RECBOLE_SHA256
    toy = ml.items.set_index("item_id").loc[1]
    assert toy["title"] == "Toy Story" and toy["year"] == 1995 and toy["genres"] == ["Animation", "Children's",
                                                                                      "Comedy"]
    assert ml.users.set_index("user_id").loc[1].tolist() == [24, "M", "technician", "85711"]
    # a second load reads the cache: no network source is reached (download=False would refuse one), no fetch runs
    def refuse(*args, **kwargs):
        raise AssertionError("the second load fetched again")

    monkeypatch.setattr(M, "_fetch_recbole_wheel", refuse)
    monkeypatch.setattr(M, "_download_grouplens", refuse)
    again = M.load_movielens("ml-100k", cache_dir=str(tmp_path), download=False, verbose=False)
    assert again.ratings.equals(ml.ratings)

