#!/usr/bin/env python3
"""cmake/spirv_coopmat_khr.py, the VK_KHR_cooperative_matrix builds' rewrite, without a device that runs them.

- The checker against an independent writer: every KHR module glslang wrote for llama.cpp's Vulkan backend
  (the peer's libggml-vulkan.so, when installed) passes it, so its idea of the instructions' operands (use,
  layout, stride, operand roles) is glslang's.
- Every KHR build of this tree passes it with constant shapes, keeps no NV instruction and no marker.
- Instruction by instruction, each KHR build says what its NV source said: same pointers, strides, memory
  operands and products, the column-major flag as the layout, the types' uses as the products use them.
- The plain NV build (A and B one type) is refused: the rewrite cannot tell their uses apart.
   test_spirv_coopmat_khr.py BUILD_DIR [PEER_DIR]
"""
import glob
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "cmake"))
import spirv_coopmat_khr as rw  # noqa: E402

failures = []


def expect(cond, what):
    if not cond:
        failures.append(what)


def words_of(path):
    with open(path, "rb") as f:
        data = f.read()
    return list(struct.unpack(f"<{len(data) // 4}I", data))


def embedded_modules(path):
    """SPIR-V modules inside a binary: each from its magic number to the last instruction that parses."""
    data = open(path, "rb").read()
    magic, pos, out = struct.pack("<I", rw.MAGIC), 0, []
    while (i := data.find(magic, pos)) >= 0:
        pos = i + 4
        if i % 4 or i + 20 > len(data):
            continue
        version, _, bound, schema = struct.unpack_from("<4I", data, i + 4)
        if version >> 24 or version >> 16 != 1 or schema or not 0 < bound < 1 << 22:
            continue
        j, words = i + 20, list(struct.unpack_from("<5I", data, i))
        while j + 4 <= len(data):
            w = struct.unpack_from("<I", data, j)[0]
            n = w >> 16
            if n == 0 or j + 4 * n > len(data) or (w & 0xFFFF) > 7000:
                break
            words += struct.unpack_from(f"<{n}I", data, j)
            j += 4 * n
        out.append(words)
    return out


def main(build, peer):
    shaders = os.path.join(build, "shaders")
    # 1. llama.cpp's KHR modules (glslang's own GL_KHR_cooperative_matrix output)
    libs = glob.glob(os.path.join(peer, "node_modules", "@node-llama-cpp", "*vulkan*", "bins", "*", "libggml-vulkan.so")) if peer else []
    if libs:
        khr = [m for m in embedded_modules(libs[0]) if [rw.CAP_KHR] in [ops for op, ops in rw.parse(m)[1] if op == rw.OP_CAPABILITY]]
        expect(len(khr) >= 10, f"llama.cpp's library holds {len(khr)} KHR cooperative-matrix modules")
        bad = [(n, p) for n, m in enumerate(khr) for p in rw.check(m, constant_shapes=False)]
        expect(not bad, f"llama.cpp's KHR modules fail the check: {bad[:3]}")
        print(f"llama.cpp: {len(khr)} KHR cooperative-matrix modules pass the check")
    else:
        print("llama.cpp peer not installed: its KHR modules are not compared")

    built = sorted(glob.glob(os.path.join(shaders, "*_khr*.spv")))
    built = [b for b in built if not b.endswith(".nv.spv")]
    expect(len(built) == 5, f"5 KHR builds (4 matmul weight formats, attention), found {len(built)}")
    for path in built:
        name = os.path.basename(path)
        out, src = words_of(path), words_of(path[:-4] + ".nv.spv")
        expect(rw.check(out) == [], f"{name}: {rw.check(out)}")
        _, oi = rw.parse(out)
        _, si = rw.parse(src)
        expect(not any(op in rw.NV.values() for op, _ in oi), f"{name}: NV instructions remain")
        expect(not any(op == rw.OP_DECORATE and ops[1] == rw.DECORATION_SPEC_ID and ops[2] in (100, 101) for op, ops in oi),
               f"{name}: a marker's SpecId remains")
        count = lambda insts: sum(op == rw.OP_SPEC_CONSTANT for op, _ in insts)
        expect(count(oi) == count(si) - 2, f"{name}: the two markers are not plain constants now")
        # 3. instruction by instruction against the NV source
        consts = {ops[1]: ops[2] for op, ops in oi if op == rw.OP_CONSTANT and len(ops) == 3}
        bools = {ops[1]: op == rw.OP_CONSTANT_TRUE for op, ops in si if op in (rw.OP_CONSTANT_TRUE, rw.OP_CONSTANT_FALSE)}
        pairs = {}
        for kind in ("type", "load", "store", "muladd", "length"):
            a = [ops for op, ops in si if op == rw.NV[kind]]
            b = [ops for op, ops in oi if op == rw.KHR[kind]]
            expect(len(a) == len(b), f"{name}: {len(a)} NV {kind} instructions, {len(b)} KHR")
            pairs[kind] = list(zip(a, b))
        for nv, khr in pairs["type"]:
            expect(khr[:5] == nv[:5], f"{name}: type %{nv[0]} changed operands")
        for nv, khr in pairs["load"]:
            expect(khr[:3] == nv[:3] and khr[4] == nv[3] and khr[5:] == nv[5:] and consts[khr[3]] == int(bools[nv[4]]),
                   f"{name}: load %{nv[1]} does not say what the NV load said")
        for nv, khr in pairs["store"]:
            expect(khr[:2] == nv[:2] and khr[3] == nv[2] and khr[4:] == nv[4:] and consts[khr[2]] == int(bools[nv[3]]),
                   f"{name}: a store does not say what the NV store said")
        for nv, khr in pairs["muladd"]:
            expect(khr == nv, f"{name}: product %{nv[1]} changed operands")
        expect(len(pairs["muladd"]) >= 1, f"{name}: no product")
        print(f"{name}: {sum(len(v) for v in pairs.values())} instructions rewritten, checked")

    # the check fails a module whose A and B uses are swapped, or whose products' shapes disagree
    if built:
        h, insts = rw.parse(words_of(built[0]))
        consts = {ops[1]: ops[2] for op, ops in insts if op == rw.OP_CONSTANT and len(ops) == 3}
        use_id = {consts[ops[5]]: ops[5] for op, ops in insts if op == rw.KHR["type"]}
        swap = {use_id[rw.USE_A]: use_id[rw.USE_B], use_id[rw.USE_B]: use_id[rw.USE_A]}
        swapped = [(op, ops[:5] + [swap.get(ops[5], ops[5])] if op == rw.KHR["type"] else ops) for op, ops in insts]
        expect(rw.check(sum(([(len(o) + 1) << 16 | op] + o for op, o in swapped), h)) != [], "the check passes swapped uses")
        other = next(i for i, v in consts.items() if v not in (16, 0, 1, 2))
        narrowed = [(op, ops[:3] + [other] + ops[4:] if op == rw.KHR["type"] and consts[ops[5]] == rw.USE_B else ops)
                    for op, ops in insts]
        expect(rw.check(sum(([(len(o) + 1) << 16 | op] + o for op, o in narrowed), h)) != [], "the check passes a K that disagrees")

    # 4. the plain NV build is refused, by name
    plain = os.path.join(shaders, "matmul_coop_nv_q4.spv")
    r = subprocess.run([sys.executable, rw.__file__, plain, os.path.join(shaders, "refused.spv")], capture_output=True, text=True)
    expect(r.returncode != 0 and "used as two operands" in r.stderr, f"the plain NV build was not refused: {r.returncode} {r.stderr}")
    expect(not os.path.exists(os.path.join(shaders, "refused.spv")), "a refused rewrite wrote its output")

    for f in failures:
        print("FAILED:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))
