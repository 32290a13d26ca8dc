"""Static word vectors (models/static.py): the word tokenizer, word2vec/GloVe file formats and their
round trip with gensim, fastText's subwords rebuilt without a pickle, features, neighbours, and
GloVe's loss, gradients and AdaGrad against direct slow computations."""

import math

import numpy as np
import pytest
import torch
from gensim.models import FastText
from gensim.models.keyedvectors import KeyedVectors

from bertology.errors import UserError
from bertology.models import family_of
from bertology.models.base import load_pretrained
from bertology.models.static import (
    GloVe,
    StaticConfig,
    StaticVectors,
    earlier_sums,
    glove_loss_and_gradients,
    glove_weight,
    normalize_word,
    read_word2vec_format,
    tokenize_words,
)

WORDS = ["the", "cat", "dog", "über", "o'clock"]


def make_vectors(lowercase=True, counts=True) -> StaticVectors:
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(len(WORDS), 4)).astype(np.float32)
    vectors[1] = [1e-8, -2.5, 3.14159274, 1e20]  # values whose text form needs care
    return StaticVectors(StaticConfig("word2vec", 4, lowercase), WORDS, vectors,
                         np.array([50, 9, 7, 3, 2]) if counts else None)


def test_tokenize_words():
    assert tokenize_words("The well-known _Mr._ O’Brien didn't pay £3.50.", lowercase=True) == \
        ["the", "well", "known", "mr", "o'brien", "didn't", "pay", "3", "50"]
    assert tokenize_words("Über 20 @-@ year Olds", lowercase=False) == ["Über", "20", "year", "Olds"]
    assert tokenize_words(" ... -- ", lowercase=True) == []
    assert normalize_word("Don’t", lowercase=True) == "don't" and normalize_word("Don’t", lowercase=False) == "Don't"


# --- files and gensim ---


@pytest.mark.parametrize("binary", [False, True])
def test_saved_file_loads_in_gensim_identically(tmp_path, binary):
    model = make_vectors()
    path = tmp_path / ("v.bin" if binary else "v.txt")
    model.save_word2vec_format(path, binary=binary)
    kv = KeyedVectors.load_word2vec_format(str(path), binary=binary)
    assert kv.index_to_key == WORDS
    assert np.array_equal(kv.vectors, model.vectors.numpy())


@pytest.mark.parametrize("binary", [False, True])
def test_gensim_file_loads_identically(tmp_path, binary):
    rng = np.random.default_rng(1)
    kv = KeyedVectors(5)
    kv.add_vectors(["alpha", "beta", "gamma"], rng.normal(size=(3, 5)).astype(np.float32))
    path = tmp_path / "g.bin"
    kv.save_word2vec_format(str(path), binary=binary)
    words, vectors = read_word2vec_format(path)  # text or binary told from the bytes
    assert words == ["alpha", "beta", "gamma"]
    assert np.array_equal(vectors, kv.vectors)


def test_glove_file_without_header(tmp_path):
    path = tmp_path / "glove.txt"
    path.write_text("the 0.5 -1 2e-3\ncat 1 2 3\n\n", encoding="utf-8")
    words, vectors = read_word2vec_format(path)
    assert words == ["the", "cat"]
    assert np.array_equal(vectors, np.array([[0.5, -1, 2e-3], [1, 2, 3]], dtype=np.float32))


def test_word2vec_c_binary_with_newlines(tmp_path):
    """word2vec.c ends each vector with a newline; gensim does not: both read the same."""
    rows = np.array([[1, 2], [3, 4]], dtype="<f4")
    path = tmp_path / "w.bin"
    path.write_bytes(b"2 2\n" + b"".join(w + b" " + r.tobytes() + b"\n" for w, r in zip([b"a", b"b"], rows)))
    words, vectors = read_word2vec_format(path, binary=True)
    assert words == ["a", "b"] and np.array_equal(vectors, rows)


@pytest.mark.parametrize("text, message", [
    ("3 2\na 1 2\nb 3 4\n", ":1: the header says 3 words but the file holds 2"),
    ("2 2\na 1 2\nb 3\n", ":3: expected a word and 2 numbers, found 2 fields"),
    ("a 1 2\nb 3 4 5\n", ":2: expected a word and 2 numbers, found 4 fields"),
    ("2 2\na 1 2\nb 3 x4\n", ":3: 'x4' is not a number"),
    ("a 1 2\na 3 4\n", ":2: the word 'a' appears twice (first on line 1)"),
    ("a 1 nan\n", ":1: the vector of 'a' holds inf or nan"),
    ("\n\n", ": empty file (no vectors)"),
    ("2 2\n", ":1: the header says 2 words but the file holds 0"),
    ("0 2\n", ": no vectors after the header"),
])
def test_bad_text_files(tmp_path, text, message):
    path = tmp_path / "bad.txt"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(UserError) as err:
        read_word2vec_format(path)
    assert str(err.value) == f"{path}{message}"


@pytest.mark.parametrize("header", [b"9" * 5000 + b" 4", b"3 " + b"9" * 5000, b"99999999999999999999 4"])
def test_a_header_number_of_thousands_of_digits_is_one_line(tmp_path, header):
    """Python's int() refuses more than 4,300 digits with a ValueError (a traceback before)."""
    path = tmp_path / "vectors.txt"
    path.write_bytes(header + b"\nthe 1 2 3 4\n")
    with pytest.raises(UserError, match=r"vectors.txt:1: the header's numbers are too large"):
        read_word2vec_format(path)


def test_bad_binary_files(tmp_path):
    row = np.array([1, 2], dtype="<f4").tobytes()
    path = tmp_path / "bad.bin"
    path.write_bytes(b"3 2\na " + row + b"b " + row)
    with pytest.raises(UserError, match=r"bad.bin:1: the header says 3 words of 2 dimensions, more than the file's "
                                        r"24 bytes can hold$"):
        read_word2vec_format(path, binary=True)
    path.write_bytes(b"2 2\na " + row + b"bcdefghijkl")  # room enough by size, but the second word never ends
    with pytest.raises(UserError, match=r"bad.bin: the header says 2 words but the file ends after 1$"):
        read_word2vec_format(path, binary=True)
    path.write_bytes(b"1 2\na " + row + b"b " + row)
    with pytest.raises(UserError, match=r"bad.bin: the header says 1 words but more data follows \(byte 14\)$"):
        read_word2vec_format(path, binary=True)
    path.write_bytes(b"a " + row)
    with pytest.raises(UserError, match=r"bad.bin:1: a binary vectors file must start with a 'V D' header line"):
        read_word2vec_format(path, binary=True)
    path.write_bytes(b"1 2\n\xff\xfe " + row)
    with pytest.raises(UserError, match=r"word 1 \(byte 4\) is not UTF-8"):
        read_word2vec_format(path, binary=True)


def test_directory_round_trip(tmp_path):
    model = make_vectors()
    model.save_pretrained(tmp_path / "vectors")
    assert sorted(p.name for p in (tmp_path / "vectors").iterdir()) == ["config.json", "vectors.bin", "vocab.txt"]
    loaded = load_pretrained(tmp_path / "vectors")
    assert loaded.words == WORDS and torch.equal(loaded.vectors, model.vectors)
    assert loaded.counts.tolist() == [50, 9, 7, 3, 2] and loaded.config == model.config
    # gensim reads the directory's files, counts included
    kv = KeyedVectors.load_word2vec_format(str(tmp_path / "vectors" / "vectors.bin"), binary=True,
                                           fvocab=str(tmp_path / "vectors" / "vocab.txt"))
    assert kv.get_vecattr("cat", "count") == 9
    assert family_of(tmp_path / "vectors").name == "static"


def test_directory_without_counts_and_mismatched_files(tmp_path):
    make_vectors(counts=False).save_pretrained(tmp_path / "v")
    assert load_pretrained(tmp_path / "v").counts is None
    make_vectors().save_word2vec_format(tmp_path / "v" / "vectors.bin", binary=True)  # fine: same shape
    (tmp_path / "v" / "vectors.bin").write_bytes(b"1 4\nthe " + bytes(16))
    with pytest.raises(UserError, match=r"holds 1 x 4 vectors, config.json says 5 x 4"):
        load_pretrained(tmp_path / "v")
    with pytest.raises(UserError, match=r"config.json: no such file"):
        load_pretrained(tmp_path)


def test_to_gensim_and_back():
    model = make_vectors()
    kv = model.to_gensim()
    assert kv.index_to_key == WORDS and np.array_equal(kv.vectors, model.vectors.numpy())
    assert kv.get_vecattr("the", "count") == 50
    back = StaticVectors.from_gensim(kv, model.config, model.counts)
    assert torch.equal(back.vectors, model.vectors)


def test_save_gensim_writes_gensims_native_file(tmp_path):
    make_vectors().save_gensim(tmp_path / "kv.model")
    kv = KeyedVectors.load(str(tmp_path / "kv.model"))  # our own file, written just above
    assert np.array_equal(kv["dog"], make_vectors().vectors[2].numpy())


@pytest.fixture(scope="module")
def fasttext_model():
    sentences = [["walking", "walked", "walks", "slowly"], ["talking", "talked", "talks", "loudly"]] * 30
    return FastText(sentences, vector_size=8, window=2, min_count=1, epochs=5, bucket=500, min_n=3, max_n=5,
                    workers=1, seed=3)


def test_fasttext_subwords_round_trip_without_pickle(tmp_path, fasttext_model):
    wv = fasttext_model.wv
    config = StaticConfig("fasttext", 8, True)
    model = StaticVectors.from_gensim(wv, config)
    assert (model.config.min_n, model.config.max_n, model.config.bucket) == (3, 5, 500)
    model.save_pretrained(tmp_path / "ft")
    assert (tmp_path / "ft" / "subwords.safetensors").is_file()
    loaded = load_pretrained(tmp_path / "ft")
    for word in ("walking", "walkingly", "Talkers"):  # in the vocabulary, unseen, unseen and capitalised
        assert torch.allclose(loaded.vector(word), torch.from_numpy(wv[word.lower()].copy()), atol=1e-6), word
    rebuilt = loaded.to_gensim()
    assert np.array_equal(rebuilt.vectors, wv.vectors)
    assert np.allclose(rebuilt["walkingly"], wv["walkingly"], atol=1e-6)
    rebuilt.adjust_vectors()  # gensim's own recomputation from the two stored matrices
    assert np.allclose(rebuilt.vectors, wv.vectors, atol=1e-6)


def test_features_and_mask():
    model = make_vectors()
    features, mask = model([["The", "unknown", "cat"], ["dog"]])
    assert features.shape == (2, 3, 4)
    assert mask.tolist() == [[True, True, True], [True, False, False]]
    assert torch.equal(features[0, 0], model.vectors[0]) and torch.equal(features[0, 2], model.vectors[1])
    assert not features[0, 1].any() and not features[1, 1:].any()  # unknown word and padding are zeros
    cased = make_vectors(lowercase=False)
    assert cased.vector("The") is None and cased.vector("o’clock") is not None


def test_nearest():
    vectors = np.array([[1, 0], [0.9, 0.1], [0, 1], [-1, 0], [0.6, 0.5]], dtype=np.float32)
    model = StaticVectors(StaticConfig("glove", 2, True), ["a", "b", "c", "d", "e"], vectors)
    assert [w for w, _ in model.nearest("a", k=3)] == ["b", "e", "c"]
    assert model.nearest("a", k=1)[0][1] == pytest.approx(0.9 / math.hypot(0.9, 0.1))
    assert [w for w, _ in model.nearest(torch.tensor([0.0, 1.0]), k=2, exclude=("c",))] == ["e", "b"]
    assert model.nearest("zzz") == []
    assert len(model.nearest("a", k=100)) == 4


# --- GloVe ---


def test_glove_weight():
    x = torch.tensor([1.0, 50.0, 100.0, 400.0])
    expected = [0.01 ** 0.75, 0.5 ** 0.75, 1.0, 1.0]
    assert glove_weight(x, 100.0, 0.75).tolist() == pytest.approx(expected)


def slow_glove(X, W, Wc, b, bc, x_max=100.0, alpha=0.75):
    """J and its gradients by the paper's formula, one nonzero entry at a time, in float64."""
    V, D = len(W), len(W[0])
    J = 0.0
    gW = [[0.0] * D for _ in range(V)]
    gWc = [[0.0] * D for _ in range(V)]
    gb, gbc = [0.0] * V, [0.0] * V
    for i in range(V):
        for j in range(V):
            if X[i][j] == 0:
                continue
            f = min(1.0, (X[i][j] / x_max) ** alpha)
            inner = sum(W[i][k] * Wc[j][k] for k in range(D)) + b[i] + bc[j] - math.log(X[i][j])
            J += 0.5 * f * inner ** 2
            for k in range(D):
                gW[i][k] += f * inner * Wc[j][k]
                gWc[j][k] += f * inner * W[i][k]
            gb[i] += f * inner
            gbc[j] += f * inner
    return J, gW, gWc, gb, gbc


def test_glove_loss_and_gradients_match_a_slow_direct_computation():
    rng = np.random.default_rng(0)
    X = [[0, 3.0, 0.5, 0], [3.0, 250.0, 0, 1.0], [0.5, 0, 0, 12.0], [0, 1.0, 12.0, 0]]
    W, Wc = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    b, bc = rng.normal(size=4), rng.normal(size=4)
    J, gW, gWc, gb, gbc = slow_glove(X, W.tolist(), Wc.tolist(), b.tolist(), bc.tolist())

    words = torch.from_numpy(np.hstack([W, b[:, None]]))  # (V, D + 1), the bias last
    contexts = torch.from_numpy(np.hstack([Wc, bc[:, None]]))
    rows, cols = (torch.from_numpy(a) for a in np.nonzero(np.array(X)))
    counts = torch.tensor([X[i][j] for i, j in zip(rows.tolist(), cols.tolist())], dtype=torch.float64)
    loss, words_grad, contexts_grad = glove_loss_and_gradients(words, contexts, rows, cols, counts, 100.0, 0.75)
    assert float(loss) == pytest.approx(J, rel=1e-12)
    full_words = torch.zeros_like(words).index_add_(0, rows, words_grad)
    full_contexts = torch.zeros_like(contexts).index_add_(0, cols, contexts_grad)
    assert np.allclose(full_words[:, :-1].numpy(), gW) and np.allclose(full_words[:, -1].numpy(), gb)
    assert np.allclose(full_contexts[:, :-1].numpy(), gWc) and np.allclose(full_contexts[:, -1].numpy(), gbc)
    # and the slow gradient is the loss's derivative (central differences on one coordinate)
    eps = 1e-6
    W_plus, W_minus = W.copy(), W.copy()
    W_plus[1, 2] += eps
    W_minus[1, 2] -= eps
    numeric = (slow_glove(X, W_plus.tolist(), Wc.tolist(), b.tolist(), bc.tolist())[0]
               - slow_glove(X, W_minus.tolist(), Wc.tolist(), b.tolist(), bc.tolist())[0]) / (2 * eps)
    assert numeric == pytest.approx(gW[1][2], rel=1e-6)


def glove_c_batch(table, grad_squares, entries, lr, vocab_size):
    """glove.c's AdaGrad (its train_glove_thread loop) written out entry by entry, as a mini-batch
    takes it: the gradients from the parameters before the batch; a vector component divided by
    G before the batch, a bias (no eta) by G at its entry's turn. Returns the new (table,
    grad_squares), float64 lists."""
    before, squares_before = [list(r) for r in table], [list(r) for r in grad_squares]
    table, grad_squares = [list(r) for r in table], [list(r) for r in grad_squares]
    dim = len(table[0]) - 1
    for i, j, x in entries:
        w, c = before[i], before[vocab_size + j]
        diff = sum(w[b] * c[b] for b in range(dim)) + w[dim] + c[dim] - math.log(x)
        fdiff = min(1.0, (x / 100.0) ** 0.75) * diff
        for row, other in ((i, c), (vocab_size + j, w)):
            for b in range(dim):
                temp = max(min(fdiff * other[b], 100.0), -100.0) * lr
                table[row][b] -= temp / math.sqrt(squares_before[row][b])
                grad_squares[row][b] += temp * temp
            table[row][dim] -= fdiff / math.sqrt(grad_squares[row][dim])
            grad_squares[row][dim] += fdiff * fdiff
    return table, grad_squares


def test_glove_adagrad_steps_match_the_rule_written_out_entry_by_entry():
    """A batch in which words and context words repeat: each bias divides by G at its own turn."""
    glove = GloVe(vocab_size=3, vector_size=2, lr=0.1, seed=1)
    glove.table.mul_(20)  # gradients far from zero, so that the order of the sums shows
    batches = [[(0, 1, 4.0), (0, 2, 9.0), (1, 1, 150.0), (0, 0, 2.0), (2, 1, 30.0)], [(1, 0, 2.0), (0, 1, 4.0)]]
    table, squares = glove.table.double().tolist(), glove.grad_squares.double().tolist()
    for batch in batches:
        table, squares = glove_c_batch(table, squares, batch, 0.1, 3)
        rows, cols, counts = (torch.tensor(v) for v in zip(*batch))
        glove.step(rows, cols, counts.float())
        assert torch.allclose(glove.grad_squares.double(), torch.tensor(squares, dtype=torch.float64), rtol=1e-5)
        assert torch.allclose(glove.table.double(), torch.tensor(table, dtype=torch.float64), rtol=1e-4, atol=1e-5)


def test_earlier_sums_add_up_the_same_index_s_earlier_entries():
    index = torch.tensor([3, 1, 3, 3, 0, 1])
    values = torch.tensor([1.0, 10.0, 100.0, 1000.0, 5.0, 20.0], dtype=torch.float64)
    assert earlier_sums(index, values).tolist() == [0.0, 0.0, 1.0, 101.0, 0.0, 10.0]


def test_glove_clips_each_vector_gradient_at_100_as_glove_c_but_not_the_bias():
    glove = GloVe(vocab_size=2, vector_size=1, lr=0.1)
    glove.table.zero_()
    glove.table[0, 0] = glove.table[3, 0] = 50.0  # word 0's and context 1's vectors: w . w~ = 2500
    glove.step(torch.tensor([0]), torch.tensor([1]), torch.tensor([200.0]))  # f(200) = 1
    diff = 2500 - math.log(200.0)  # gradient of w_0: diff * 50 = 1.2e5, clipped to 100, times lr
    assert glove.table[0, 0].item() == pytest.approx(50 - 0.1 * 100)
    assert glove.table[0, 1].item() == pytest.approx(-diff, rel=1e-5)  # the bias: unclipped, no lr
    assert glove.grad_squares[0, 0].item() == pytest.approx(1 + (0.1 * 100) ** 2)


@pytest.mark.slow
def test_glove_fits_a_low_rank_log_count_matrix():
    """log X = U V^T exactly (rank 2): GloVe should drive the loss near zero and W + W~ should
    recover the geometry (words with equal rows of U end up with near-equal vectors)."""
    rng = np.random.default_rng(0)
    U = rng.normal(size=(12, 2))
    U[1] = U[0]  # words 0 and 1 co-occur alike
    X = np.exp(2 + U @ U.T)
    rows, cols = (torch.from_numpy(a) for a in np.nonzero(X))
    counts = torch.from_numpy(X[rows, cols]).float()
    glove = GloVe(12, 4, lr=0.1, seed=0)
    first = glove.step(rows, cols, counts)
    for _ in range(1500):
        last = glove.step(rows, cols, counts)
    assert last < first / 50
    vectors = torch.from_numpy(glove.vectors())
    unit = vectors / vectors.norm(dim=1, keepdim=True)
    assert float(unit[0] @ unit[1]) > 0.99
    assert vectors.shape == (12, 4)
