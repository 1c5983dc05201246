"""ferry.distributed under torch 2's parallelism: FSDP (FULL_SHARD)
training on CPU, DeviceMesh and DTensor (distribute_tensor, redistribute,
full_tensor, matmuls, a tensor-parallel MLP) and
torch.distributed.checkpoint (save and load, each backend's checkpoint
loaded by the other's group), each run over backend "ferry" and over gloo
in the same job and compared bit for bit (torch2_rank.py): on 2 and 3
ranks, and DTensor and DCP on a 2 x 2 mesh of 4. FSDP2 (fully_shard) is
left out: torch 2.6 cannot run it on CPU over any backend. Marked torch2:
CTest (python/CMakeLists.txt) deselects these where torch is older than
2."""
import json
import time

import pytest

from test_distributed import run_ok

pytestmark = [pytest.mark.distributed, pytest.mark.torch2]


@pytest.mark.parametrize("world", [2, 3])
def test_fsdp_dtensor_and_checkpoints_on_ferry_match_gloo(tmp_path, world):
    t0 = time.monotonic()
    for code, out, err in run_ok("torch2_rank.py", world, ["--dir", str(tmp_path)]):
        assert out.strip().endswith("ok"), out
    took = time.monotonic() - t0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world)]
    for rank, s in enumerate(ranks):
        assert s["world"] == world
        fsdp = s["fsdp"]
        # FSDP over a group and over a mesh of each backend: each rank's
        # losses and the full parameters after training, the same bits
        # (both backends reduce-scatter with the same order of additions:
        # the rank checked that too).
        assert len(fsdp["ferry"]["losses"]) == 4
        assert fsdp["ferry"] == fsdp["gloo"] == fsdp["mesh-ferry"] == fsdp["mesh-gloo"]
        # DTensor: every redistribution and matmul, and the tensor-parallel
        # MLP's output and gradients, the same bits over both backends.
        assert s["dtensor"]["ferry"] == s["dtensor"]["gloo"] and len(s["dtensor"]["ferry"]) == 16
        assert s["tp"]["ferry"] == s["tp"]["gloo"]
        # DCP: every checkpoint loaded back over each backend to the bits
        # saved (the rank compared the full model and optimizer states).
        assert len(s["checkpoint"]["loaded"]) == 10
        # Full (replicated) values are the same on every rank.
        for name in ("ferry", "gloo"):
            assert fsdp[name]["params"] == ranks[0]["fsdp"][name]["params"]
        assert s["checkpoint"]["saved"] == ranks[0]["checkpoint"]["saved"]
        assert s["tp"] == ranks[0]["tp"]
    s = ranks[0]
    print(f"{world} ranks: {took:.1f} s; phases {', '.join(f'{k} {v:.1f} s' for k, v in s['seconds'].items())}")


def test_a_2d_mesh_on_ferry_matches_gloo(tmp_path):
    # 4 ranks as a 2 x 2 mesh: ferry's dimension groups are new_group()s of
    # the default backend (init_device_mesh), gloo's are made by hand.
    t0 = time.monotonic()
    for code, out, err in run_ok("torch2_rank.py", 4, ["--dir", str(tmp_path), "--mesh", "2d"]):
        assert out.strip().endswith("ok"), out
    took = time.monotonic() - t0
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    for s in ranks:
        # Every redistribution over one or both dimensions, a matmul with a
        # Partial result, the tensor-parallel MLP on "tp": the same bits.
        assert s["dtensor_2d"]["ferry"] == s["dtensor_2d"]["gloo"] and len(s["dtensor_2d"]["ferry"]) == 14
        # Replicated results agree across ranks too.
        for key in ("full_tensor", "partial,partial->replicate", "matmul", "tp output"):
            assert s["dtensor_2d"]["ferry"][key] == ranks[0]["dtensor_2d"]["ferry"][key]
        # DCP: each backend's 2-D sharded checkpoint loaded over the other
        # one, as saved and resharded (the rank compared the values).
        assert len(s["checkpoint_2d"]) == 4
    print(f"2 x 2 mesh: {took:.1f} s; phase {ranks[0]['seconds']['2d']:.1f} s")
