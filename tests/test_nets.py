"""Known-answer tests of the equivariant attention networks (iastudio.core.nets): groups, layers, models, data, CLI."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from numpy.testing import assert_allclose

torch = pytest.importorskip("torch", reason="PyTorch is not installed (optional extra [nets])")
# the models here are tiny: one thread avoids thread hand-off costs (8x slower on a busy 2-core machine)
torch.set_num_threads(1)

from iastudio.core.nets import data as ndata  # noqa: E402
from iastudio.core.nets.attentive import AttentiveGroupConv, InputAttention  # noqa: E402
from iastudio.core.nets.gconv import GroupConv, LiftingConv  # noqa: E402
from iastudio.core.nets.groups import Group, act, act_image, get_group, rotate_images  # noqa: E402
from iastudio.core.nets.gsa import GroupSelfAttention, LiftingSelfAttention  # noqa: E402
from iastudio.core.nets.models import MODELS, build_model, count_parameters  # noqa: E402

P4, P4M = Group(4), Group(4, True)


def _blob(n=2, size=20, seed=0):
    """Smooth random images that vanish towards the border (so resampled rotations lose nothing)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 1, size, size, generator=g)
    r = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    window = torch.exp(-(r[:, None] ** 2 + r[None, :] ** 2) / (2 * (size / 5) ** 2))
    x = torch.nn.functional.avg_pool2d(x, 3, 1, 1) * window
    return x


def _np(t):
    return t.detach().cpu().numpy()


# ---------------------------------------------------------------- groups


@pytest.mark.parametrize("group", [P4, P4M, Group(8), Group(4, True)])
def test_group_table_is_a_group(group):
    n = group.order
    tab = group.cayley
    assert sorted(tab[0]) == list(range(n))
    for a in range(n):
        assert tab[a, group.inv(a)] == 0
        for b in range(n):
            for c in range(n):
                assert tab[tab[a, b], c] == tab[a, tab[b, c]]


@pytest.mark.parametrize("group", [P4, P4M])
def test_image_action_is_a_representation_and_matches_matrices(group):
    x = torch.randn(1, 1, 7, 7)
    x[0, 0, 3, 4] = 100.0  # a marked pixel one column right of the centre: offset (0, 1)
    for a in range(group.order):
        ya = act_image(x, group, a)
        # the marked pixel moves to matrix @ offset
        r, c = np.unravel_index(int(ya.argmax()), (7, 7))
        assert_allclose(np.array([r - 3, c - 3]), group.matrix(a) @ np.array([0.0, 1.0]), atol=1e-12)
        for b in range(group.order):
            assert torch.equal(act_image(act_image(x, group, b), group, a), act_image(x, group, group.mul(a, b)))


def test_bilinear_rotation_agrees_with_rot90():
    x = _blob(1, 16)
    exact = rotate_images(x, math.pi / 2)
    resampled = rotate_images(x, math.pi / 2 * (1 + 1e-8))  # goes through grid_sample
    assert torch.equal(exact, torch.rot90(x, 1, (-2, -1)))
    assert_allclose(_np(resampled), _np(exact), atol=1e-4)


def test_get_group_names():
    assert get_group("p4m") == Group(4, True)
    assert get_group("r12") == Group(12)
    assert get_group("r4m").order == 8
    with pytest.raises(ValueError, match="unknown group"):
        get_group("so3")


# ---------------------------------------------------------------- group convolutions and attention


@pytest.mark.parametrize("group", [P4, P4M], ids=["p4", "p4m"])
def test_lifting_and_group_convolution_are_equivariant(group):
    torch.manual_seed(0)
    lift, conv = LiftingConv(2, 3, 3, group=group), GroupConv(3, 4, 3, group=group, padding=1)
    x = torch.randn(2, 2, 10, 10)
    y = conv(lift(x))
    for g in range(group.order):
        assert_allclose(_np(conv(lift(act_image(x, group, g)))), _np(act(y, group, g)), atol=1e-5)
    # and not invariant: the output really moves
    assert (act(y, group, 1) - y).abs().max() > 1e-2


def test_group_convolution_refuses_inexact_groups():
    with pytest.raises(ValueError, match="90 degree"):
        GroupConv(1, 1, 3, group=Group(8))


@pytest.mark.parametrize("group", [P4, P4M], ids=["p4", "p4m"])
def test_attentive_group_convolution_and_its_maps_are_equivariant(group):
    torch.manual_seed(1)
    lift = LiftingConv(1, 4, 3, group=group)
    att, inp = AttentiveGroupConv(4, 3, 3, group=group), InputAttention(4, group=group)
    x = torch.randn(2, 1, 12, 12)
    y = att(lift(x))
    m_full = att.last_attention
    yi = inp(lift(x))
    m_in = inp.last_attention
    assert m_full.shape == (2, group.order, 8, 8)
    assert m_in.shape == (2, group.order, 10, 10)
    assert float(m_full.min()) >= 0
    assert float(m_full.max()) <= 1
    for g in range(1, group.order):
        xg = act_image(x, group, g)
        assert_allclose(_np(att(lift(xg))), _np(act(y, group, g)), atol=1e-5)
        # the spatial attention maps turn (and permute over H) with the input
        assert_allclose(_np(att.last_attention), _np(act(m_full[:, None], group, g)[:, 0]), atol=1e-6)
        assert_allclose(_np(inp(lift(xg))), _np(act(yi, group, g)), atol=1e-5)
        assert_allclose(_np(inp.last_attention), _np(act(m_in[:, None], group, g)[:, 0]), atol=1e-6)
    assert float((act(m_full[:, None], group, 1)[:, 0] - m_full).abs().max()) > 1e-4  # maps are not constant


def test_attention_changes_the_group_convolution():
    """With the attention branch, the output differs from the plain group convolution with the same filter."""
    torch.manual_seed(2)
    att = AttentiveGroupConv(3, 2, 3, group=P4)
    plain = GroupConv(3, 2, 3, group=P4)
    plain.weight.data.copy_(att.weight.data)
    x = torch.randn(1, 3, 4, 9, 9)
    ya, yp = att(x), plain(x)
    assert (ya - yp).abs().max() > 1e-3
    # alpha^+ in [0, 1] only shrinks each term: with a non-negative input and filter the output is smaller
    att.weight.data.abs_()
    plain.weight.data.copy_(att.weight.data)
    xp = x.abs()
    assert bool((att(xp) <= plain(xp) + 1e-6).all())


@pytest.mark.parametrize("group", [P4, P4M], ids=["r4", "r4m"])
def test_lifting_and_group_self_attention_are_equivariant(group):
    torch.manual_seed(3)
    lift = LiftingSelfAttention(1, 6, group=group, heads=2, head_dim=3)
    gsa = GroupSelfAttention(6, 5, group=group, heads=2, head_dim=3)
    x = _blob(2, 7)
    y = gsa(lift(x))
    probs = lift.last_attention
    assert_allclose(_np(probs.sum(-1)), 1.0, atol=1e-5)
    for g in range(1, group.order):
        assert_allclose(_np(gsa(lift(act_image(x, group, g)))), _np(act(y, group, g)), atol=1e-5)
    assert (act(y, group, 1) - y).abs().max() > 1e-3


def test_z2_self_attention_is_not_rotation_equivariant():
    torch.manual_seed(4)
    z2 = Group(1)
    lift = LiftingSelfAttention(1, 4, group=z2, heads=2, head_dim=2)
    x = _blob(1, 11)
    y = lift(x)
    err = (lift(torch.rot90(x, 1, (-2, -1))) - torch.rot90(y, 1, (-2, -1))).abs().max()
    assert err > 1e-3


# ---------------------------------------------------------------- whole networks


def _small(name):
    torch.manual_seed(5)
    opts = {"channels": 3}
    if name.startswith("gsa") or name.startswith("z2sa"):
        opts.update(heads=2, head_dim=2, blocks=2)
    return build_model(name, **opts).eval()


EXACT = ["p4cnn-small", "a-p4cnn-small", "aF-p4cnn-small", "p4mcnn-small", "a-p4mcnn-small", "gsa-r4-small",
         "gsa-r4m-small"]


@pytest.mark.parametrize("name", EXACT)
def test_exact_models_have_invariant_logits(name):
    model = _small(name)
    x = _blob(2, 16 if "gsa" in name else 24)
    with torch.no_grad():
        z = model(x)
        for k in (1, 2, 3):
            assert_allclose(_np(model(torch.rot90(x, k, (-2, -1)))), _np(z), atol=1e-5)
        if "4m" in name:
            assert_allclose(_np(model(torch.flip(x, (-1,)))), _np(z), atol=1e-5)
    assert z.abs().max() > 1e-3


@pytest.mark.parametrize("name", ["cnn-small", "z2sa-small"])
def test_baselines_are_not_rotation_invariant(name):
    torch.manual_seed(5)
    model = build_model(name).eval()
    x = _blob(2, 24)
    with torch.no_grad():
        # float noise of the exact models is ~1e-7; an untrained Z2-SA moves by ~1e-4
        assert (model(torch.rot90(x, 1, (-2, -1))) - model(x)).abs().max() > 1e-5


def test_small_parameter_counts():
    counts = {name: count_parameters(build_model(name)) for name in MODELS if name.endswith("-small")}
    # p4cnn by hand: lifting 10*9 + 10, five group convs 10*10*4*9 + 10, six batch norms 2*10, linear 10*10 + 10
    assert counts["p4cnn-small"] == 100 + 5 * 3610 + 6 * 20 + 110
    assert counts["cnn-small"] == 200 + 5 * (20 * 20 * 9 + 20) + 6 * 40 + 210
    assert counts["a-p4cnn-small"] > counts["p4cnn-small"]
    assert counts["aF-p4cnn-small"] > counts["p4cnn-small"]
    assert counts["gsa-r8-small"] > counts["gsa-r4-small"]  # only the group-encoding table grows with N


# ---------------------------------------------------------------- data


def test_rot_digits_is_fixed_and_rotated():
    a = ndata.rot_digits()
    b = ndata.rot_digits()
    up = ndata.rot_digits(train_rotated=False)
    assert a.x_train.shape[1:] == (28, 28)
    assert a.x_train.dtype == np.float32
    assert len(a.x_train) + len(a.x_test) == 1797
    assert set(np.unique(a.y_train)) == set(range(10))
    assert_allclose(a.x_test, b.x_test)
    assert_allclose(a.y_train, up.y_train)
    assert_allclose(a.x_test, up.x_test)
    assert not np.allclose(a.x_train, up.x_train)
    # upright training digits are centred 20x20 with an empty frame
    assert float(up.x_train[:, :4].max()) == 0.0
    assert 0.5 < float(up.x_train.max()) <= 1.0


def _write_pngs(folder, sizes):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label, (h, w) in sizes.items():
        d = folder / label
        d.mkdir(parents=True)
        for k in range(4):
            img = np.zeros((h, w), np.uint8)
            img[h // 4: 3 * h // 4, w // 3: 2 * w // 3] = rng.integers(100, 255)
            Image.fromarray(img).save(d / f"{k}.png")


def test_folder_loader(tmp_path):
    _write_pngs(tmp_path, {"bar": (40, 30), "box": (17, 23)})
    ds = ndata.load_folder(tmp_path, size=24)
    assert ds.classes == ["bar", "box"]
    assert ds.x_train.shape[1:] == (24, 24)
    assert len(ds.x_train) + len(ds.x_test) == 8
    assert_allclose(ds.x_train.reshape(len(ds.x_train), -1).max(1), 1.0, atol=1e-6)


def test_folder_without_labels_is_refused(tmp_path):
    from PIL import Image

    Image.fromarray(np.full((10, 10), 200, np.uint8)).save(tmp_path / "a.png")
    with pytest.raises(ValueError, match="labelled"):
        ndata.load_folder(tmp_path)


def test_amat_loader(tmp_path):
    good = tmp_path / "good.amat"
    rows = np.hstack([np.random.default_rng(0).random((3, 784)), np.array([[1], [7], [0]])])
    np.savetxt(good, rows)
    x, y = ndata.load_amat(good)
    assert x.shape == (3, 28, 28)
    assert list(y) == [1, 7, 0]
    bad = tmp_path / "bad.amat"
    np.savetxt(bad, np.ones((2, 100)))
    with pytest.raises(ValueError, match=r"bad\.amat.*785"):
        ndata.load_amat(bad)
    with pytest.raises(ValueError, match="missing"):
        ndata.load_rotmnist(tmp_path)


# ---------------------------------------------------------------- training, saving, CLI


def _tiny_dataset():
    x = _np(_blob(24, 24, seed=3))[:, 0]
    y = np.arange(24) % 2
    x[y == 1, 8:12, :] += 0.5  # a bar: learnable
    return ndata.Dataset(x[:16], y[:16], x[16:], y[16:], ["a", "b"], "tiny")


def test_train_save_and_load_roundtrip(tmp_path):
    from iastudio.core.nets.train import load_model, predict_logits, save_model, train_model

    ds = _tiny_dataset()
    seen = []
    model, res = train_model("p4cnn-small", ds, epochs=2, batch=8, device="cpu", model_options={"channels": 2},
                             on_epoch=seen.append)
    assert [r["epoch"] for r in seen] == [1, 2]
    assert res.epochs == 2
    assert res.invariance_error_90 < 1e-5
    assert res.invariance_error_group is None
    save_model(model, tmp_path / "model.pt", name="p4cnn-small", n_classes=2, options={"channels": 2})
    again = load_model(tmp_path / "model.pt")
    assert_allclose(_np(predict_logits(again, ds.x_test)), _np(predict_logits(model, ds.x_test)), atol=1e-6)


def test_train_can_skip_the_invariance_measures(monkeypatch):
    """``invariance=False`` (slow GSA-Nets in benchmarks/nets_compare.py): no rotated forward pass, NaN / None."""
    from iastudio.core.nets import train

    ds = _tiny_dataset()
    calls = []
    real = train.invariance_errors
    monkeypatch.setattr(train, "invariance_errors", lambda *a, **k: calls.append(k["angles"]) or real(*a, **k))
    _, res = train.train_model("p4cnn-small", ds, epochs=1, batch=8, device="cpu", model_options={"channels": 2},
                               invariance=False)
    assert calls == []
    assert math.isnan(res.invariance_error_90)
    assert res.invariance_error_group is None
    assert res.invariance_error_offgroup is None
    assert 0.0 <= res.test_error <= 1.0
    _, res = train.train_model("p4cnn-small", ds, epochs=1, batch=8, device="cpu", model_options={"channels": 2})
    assert len(calls) == 2
    assert res.invariance_error_90 < 1e-5
    assert math.isfinite(res.invariance_error_offgroup)


class _Evil:
    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (pathlib.Path(_Evil.target),))


def test_model_file_that_is_not_a_state_dict_is_refused(tmp_path):
    from iastudio.core.nets.train import load_model

    _Evil.target = str(tmp_path / "pwned")
    bad = tmp_path / "evil.pt"
    torch.save({"weight": _Evil()}, bad)
    with pytest.raises(ValueError, match=r"evil\.pt"):
        load_model(bad, name="p4cnn", n_classes=2)
    assert not (tmp_path / "pwned").exists()
    other = tmp_path / "other.pt"
    torch.save({"x": torch.zeros(2)}, other)
    with pytest.raises(ValueError, match="do not fit"):
        load_model(other, name="p4cnn", n_classes=2)


def test_cli_train_and_compare(tmp_path, capsys):
    from iastudio.core.nets.cli import main

    _write_pngs(tmp_path / "imgs", {"bar": (30, 20), "box": (20, 20), "dot": (25, 25)})
    out = tmp_path / "run"
    rc = main(["train", "--model", "p4cnn-small", "--data", str(tmp_path / "imgs"), "--epochs", "1", "--batch", "4",
               "--channels", "2", "--size", "24", "--device", "cpu", "--quiet", "--out", str(out)])
    assert rc == 0
    metrics = json.loads((out / "metrics.json").read_text())
    for key in ("test_accuracy", "test_error", "parameters", "epochs", "train_seconds", "invariance_error_90"):
        assert key in metrics
    assert metrics["epochs"] == 1
    assert (out / "learning_curve.png").stat().st_size > 1000
    state = torch.load(out / "model.pt", weights_only=True)
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    rc = main(["compare", "--models", "cnn-small,p4cnn-small", "--seeds", "0,1", "--data", str(tmp_path / "imgs"),
               "--epochs", "1", "--batch", "4", "--channels", "2", "--size", "24", "--quiet", "--out",
               str(tmp_path / "cmp")])
    text = capsys.readouterr().out
    assert rc == 0
    assert "| cnn-small |" in text
    assert "| p4cnn-small |" in text
    assert "±" in text
    assert (tmp_path / "cmp" / "compare.md").is_file()


def test_cli_plain_errors(tmp_path, capsys):
    from iastudio.core.nets.cli import main

    (tmp_path / "flat").mkdir()
    rc = main(["train", "--model", "cnn", "--data", str(tmp_path / "flat"), "--out", str(tmp_path / "o")])
    assert rc == 1
    assert "ia-nets:" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--model", "resnet", "--out", str(tmp_path / "o")])


@pytest.mark.parametrize("name", ["gsa-r4-small", "a-p4cnn-small"])
def test_inspection_maps_turn_with_the_input(name):
    from iastudio.core.nets.inspect import inspect_image

    model = _small(name)
    img = _np(_blob(1, 24))[0, 0]
    a = inspect_image(model, img)
    b = inspect_image(model, img, angle_deg=90)
    assert a.maps is not None
    assert len(a.maps) == 4
    assert_allclose(b.image, np.rot90(a.image), atol=1e-7)
    assert_allclose(b.probabilities, a.probabilities, atol=1e-5)
    for h in range(4):  # rotated, and moved on to the next group element
        assert_allclose(b.maps[(h + 1) % 4], np.rot90(a.maps[h]), atol=1e-5)
    assert inspect_image(_small("p4cnn-small"), img).maps is None
    if name.startswith("gsa"):  # one query's weights: the query turns with the image, the weights follow
        qa = inspect_image(model, img, query=(8, 5))
        qb = inspect_image(model, img, angle_deg=90, query=(8, 5))
        assert "row 8, column 5" in qa.kind
        assert "row 18, column 8" in qb.kind
        assert_allclose(qa.maps.sum(axis=(1, 2)), 1.0, atol=1e-5)
        for h in range(4):
            assert_allclose(qb.maps[(h + 1) % 4], np.rot90(qa.maps[h]), atol=1e-6)


def test_nets_compare_table_from_json_lines(tmp_path):
    """benchmarks/nets_compare.py: one row per model and budget, mean +- std over seeds; a cut line is left out."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import nets_compare

    def rec(model, seed, err, n_train):
        budget = {"n_train": n_train, "epochs": 2, "batch": 32, "n_test": 500, "eval_subset": 100}
        return {"model": model, "seed": seed, "budget": budget, "result": {
            "test_error": err, "parameters": 24_610, "invariance_error_90": 1e-7, "invariance_error_group": None,
            "invariance_error_offgroup": float("nan"), "train_seconds": 10.0 * (seed + 1)}}

    path = tmp_path / "runs.jsonl"
    lines = [json.dumps(rec("p4cnn", s, e, 1000)) for s, e in enumerate([0.10, 0.20, 0.30])]
    lines.append(json.dumps(rec("p4cnn", 0, 0.9, 100)))
    path.write_text("\n".join(lines) + '\n{"model": "p4cnn", "se')  # a run stopped while writing
    records = nets_compare.read_jsonl([path])
    assert len(records) == 4
    rows = nets_compare.table(records).splitlines()[2:]
    assert len(rows) == 2
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    assert cells[0] == "p4cnn"
    assert cells[1] == "1,000 / 2 ep. / batch 32 / 500 test"
    assert cells[2] == f"{20.0:.2f} ± {10.0:.2f}"
    assert cells[3] == "3"
    assert cells[4].startswith("2.048 ± 0.045")
    assert cells[5] == "24,610" == cells[6]
    assert cells[7] == "1.0e-07 ± 0.0e+00"
    assert cells[8] == "–"
    assert cells[9] == "–"
    assert cells[10] == "20 ± 10"
    cells = [c.strip() for c in rows[1].split("|")[1:-1]]
    assert cells[1].startswith("100 /")
    assert cells[2] == "90.00"
    assert cells[3] == "1"


def test_predict_logits_halves_a_batch_that_runs_out_of_device_memory():
    """A batch too large for the card is redone in halves: the same logits, and the smaller batch is kept."""
    from iastudio.core.nets.train import predict_logits

    net = build_model("cnn-small").eval()
    seen = []

    class Tight(torch.nn.Module):  # a card that holds at most 3 images at once
        def forward(self, x):
            seen.append(len(x))
            if len(x) > 3:
                raise torch.OutOfMemoryError("CUDA out of memory (test)")
            return net(x)

    x = np.random.default_rng(0).normal(size=(10, 28, 28)).astype(np.float32)
    got = predict_logits(Tight(), x, batch=16)
    assert_allclose(_np(got), _np(predict_logits(net, x)), atol=1e-6)
    assert seen == [10, 8, 4, 2, 2, 2, 2, 2]  # batch 16 (all 10), 8 and 4 fail, then batches of 2 to the end


def test_predict_logits_gives_up_when_one_image_does_not_fit():
    from iastudio.core.nets.train import predict_logits

    class Full(torch.nn.Module):
        def forward(self, x):
            raise torch.OutOfMemoryError("CUDA out of memory (test)")

    from iastudio.core.backend import DeviceOutOfMemory

    with pytest.raises(DeviceOutOfMemory, match="network evaluation: out of GPU memory even with blocks of 1"):
        predict_logits(Full(), np.zeros((2, 28, 28), np.float32), batch=4)


def _small_gsa(group):
    """A small seeded group self-attention layer (paper-style group encoding) and an input for it."""
    torch.manual_seed(0)
    g = get_group(group)
    layer = GroupSelfAttention(4, 6, group=g, heads=2, head_dim=4, size=3, group_encoding="mlp", position_dim=1)
    return layer, torch.randn(2, 4, g.order, 6, 6)


def test_group_self_attention_recomputed_in_the_backward_pass_gives_the_same_gradients(monkeypatch):
    """Checkpointing the attention per output element (large layers) changes memory, not the gradients."""
    from iastudio.core.nets import gsa

    layer, x = _small_gsa("r4")

    def grads(threshold):
        monkeypatch.setattr(gsa, "CHECKPOINT_ELEMENTS", threshold)
        layer.zero_grad()
        y = layer(x)
        (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
        return y.detach().clone(), [p.grad.clone() for p in layer.parameters()]

    y_kept, g_kept = grads(10**12)  # scores kept (small layers)
    y_again, g_again = grads(0)  # recomputed in the backward pass
    assert_allclose(y_again.numpy(), y_kept.numpy(), rtol=1e-6, atol=1e-6)
    for a, b in zip(g_again, g_kept, strict=True):
        assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


def test_recomputed_group_self_attention_keeps_far_less_for_the_backward_pass(monkeypatch):
    from iastudio.core.nets import gsa

    layer, x = _small_gsa("r8")

    def saved_bytes(threshold):
        monkeypatch.setattr(gsa, "CHECKPOINT_ELEMENTS", threshold)
        storages = {}  # a tensor saved for several elements is held once

        def pack(t):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(x).sum()
        return sum(storages.values())

    kept, recomputed = saved_bytes(10**12), saved_bytes(0)
    assert recomputed < kept / 3  # measured: a quarter for R8 here (an eighth for R16)
