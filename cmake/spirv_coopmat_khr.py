#!/usr/bin/env python3
"""The VK_KHR_cooperative_matrix build of a shader, made from its VK_NV_cooperative_matrix build.

Debian 12's glslang has no GL_KHR_cooperative_matrix, but the two SPIR-V extensions differ only in how
instructions are spelled, except that a KHR matrix type names its use (A, B or accumulator), where an NV type
does not. So the shader is compiled for NV with COOPMAT_KHR_SOURCE (shaders/coop_types.glsl): there the rows
of A and of B are two specialization constants, which make A, B and the accumulator three distinct types.
This rewrite reads each type's use off OpCooperativeMatrixMulAddNV's operands, turns those specialization
constants into plain constants, and respells:
  OpCapability CooperativeMatrixNV, OpExtension    -> the KHR capability and extension
  OpTypeCooperativeMatrixNV   r comp scope rows cols          -> OpTypeCooperativeMatrixKHR ... use
  OpCooperativeMatrixLoadNV   rt r ptr stride colmajor [mem]  -> OpCooperativeMatrixLoadKHR rt r ptr layout stride [mem]
  OpCooperativeMatrixStoreNV  ptr obj stride colmajor [mem]   -> OpCooperativeMatrixStoreKHR ptr obj layout stride [mem]
  OpCooperativeMatrixMulAddNV, OpCooperativeMatrixLengthNV    -> the KHR opcodes, same operands
Anything it cannot map (a type used as both A and B, a column-major flag that is not a constant, an NV matrix
no product uses, a specialization constant elsewhere in a matrix type) stops the build with a message.   spirv_coopmat_khr.py IN.spv OUT.spv [--check]
--check only verifies an already rewritten module (tests/test_spirv_coopmat_khr.py).
"""
import struct
import sys

MAGIC = 0x07230203
OP_NAME, OP_MEMBER_NAME, OP_EXTENSION, OP_CAPABILITY = 5, 6, 10, 17
OP_CONSTANT_TRUE, OP_CONSTANT_FALSE, OP_CONSTANT, OP_SPEC_CONSTANT = 41, 42, 43, 50
OP_FUNCTION, OP_DECORATE, OP_MEMBER_DECORATE = 54, 71, 72
TYPE_OPCODES = set(range(19, 40))
DEBUG_OR_ANNOTATION = {1, 2, 3, 4, OP_NAME, OP_MEMBER_NAME, 7, 8, OP_EXTENSION, 11, 14, 15, 16, OP_CAPABILITY,
                       OP_DECORATE, OP_MEMBER_DECORATE, 73, 74, 75, 330, 331, 332, 5632, 5633}
DECORATION_SPEC_ID = 1

CAP_NV, CAP_KHR = 5357, 6022
NV = {"type": 5358, "load": 5359, "store": 5360, "muladd": 5361, "length": 5362}
KHR = {"type": 4456, "load": 4457, "store": 4458, "muladd": 4459, "length": 4460}
USE_A, USE_B, USE_ACCUMULATOR = 0, 1, 2          # Cooperative Matrix Use
ROW_MAJOR, COLUMN_MAJOR = 0, 1                   # Cooperative Matrix Layout
EXT_NV, EXT_KHR = "SPV_NV_cooperative_matrix", "SPV_KHR_cooperative_matrix"


def fail(msg):
    sys.exit("spirv_coopmat_khr: " + msg)


def parse(words):
    if len(words) < 5 or words[0] != MAGIC:
        fail("not a SPIR-V module")
    insts, i = [], 5
    while i < len(words):
        count, op = words[i] >> 16, words[i] & 0xFFFF
        if count == 0 or i + count > len(words):
            fail(f"malformed instruction at word {i}")
        insts.append([op, list(words[i + 1:i + count])])
        i += count
    return list(words[:5]), insts


def encode_string(s):
    b = s.encode() + b"\0"
    b += b"\0" * (-len(b) % 4)
    return list(struct.unpack(f"<{len(b) // 4}I", b))


def decode_string(ops):
    return struct.pack(f"<{len(ops)}I", *ops).split(b"\0")[0].decode()


def value_types(insts):
    """id -> type id of every value whose instruction has the (result type, result) form."""
    types, defined, out = set(), set(), {}
    for op, ops in insts:
        if op in DEBUG_OR_ANNOTATION or not ops:
            continue
        if op in TYPE_OPCODES or op == NV["type"] or op == KHR["type"]:
            types.add(ops[0])
            defined.add(ops[0])
        elif len(ops) >= 2 and ops[0] in types and ops[1] not in defined:
            out[ops[1]] = ops[0]
            defined.add(ops[1])
    return out


def rewrite(words):
    header, insts = parse(words)
    typeof = value_types(insts)
    defs = {ops[1]: (op, ops) for op, ops in insts if op in (OP_CONSTANT_TRUE, OP_CONSTANT_FALSE, OP_CONSTANT, OP_SPEC_CONSTANT)}
    coop_types = {ops[0]: ops for op, ops in insts if op == NV["type"]}
    if not coop_types:
        fail("the module has no NV cooperative matrix type")
    use = {}

    def assign(type_id, u):
        if use.setdefault(type_id, u) != u:
            fail(f"type %{type_id} is used as two operands of a product (A, B, accumulator)")

    for op, ops in insts:
        if op == NV["muladd"]:
            rt, _, a, b, c = ops
            assign(rt, USE_ACCUMULATOR)
            assign(typeof[a], USE_A)
            assign(typeof[b], USE_B)
            assign(typeof[c], USE_ACCUMULATOR)
    for t in coop_types:
        if t not in use:
            fail(f"cooperative matrix type %{t} is in no product, so its use is unknown")
    # the constants the KHR operands name: uses and layouts, 32-bit integers of the scope constant's type
    scope_id = next(iter(coop_types.values()))[2]
    if scope_id not in defs or defs[scope_id][0] != OP_CONSTANT:
        fail("the matrices' scope is not a constant")
    uint_type = defs[scope_id][1][0]
    bound = header[3]
    new_consts = {}
    for key in ("use", 0), ("use", 1), ("use", 2), ("layout", 0), ("layout", 1):
        new_consts[key] = bound
        bound += 1
    header[3] = bound
    is_spec = lambda i: defs.get(i, (None,))[0] == OP_SPEC_CONSTANT
    markers = {ops[3] for ops in coop_types.values() if is_spec(ops[3])}
    if any(is_spec(ops[4]) or (is_spec(ops[3]) and use[ops[0]] == USE_ACCUMULATOR) for ops in coop_types.values()):
        fail("only A's and B's rows may be specialization constants (coop_types.glsl's markers, made constants here)")

    def layout(col_major_id):
        d = defs.get(col_major_id)
        if not d or d[0] not in (OP_CONSTANT_TRUE, OP_CONSTANT_FALSE):
            fail("a column-major flag is not a constant")
        return new_consts[("layout", COLUMN_MAJOR if d[0] == OP_CONSTANT_TRUE else ROW_MAJOR)]

    out = []
    for op, ops in insts:
        if op == OP_CAPABILITY and ops == [CAP_NV]:
            out.append((OP_CAPABILITY, [CAP_KHR]))
        elif op == OP_EXTENSION and decode_string(ops) == EXT_NV:
            out.append((OP_EXTENSION, encode_string(EXT_KHR)))
        elif op == OP_DECORATE and ops[0] in markers and ops[1] == DECORATION_SPEC_ID:
            continue
        elif op == OP_SPEC_CONSTANT and ops[1] in markers:
            out.append((OP_CONSTANT, ops))
        elif op == NV["type"]:
            out.append((KHR["type"], ops + [new_consts[("use", use[ops[0]])]]))
        elif op == NV["load"]:
            out.append((KHR["load"], ops[:3] + [layout(ops[4]), ops[3]] + ops[5:]))
        elif op == NV["store"]:
            out.append((KHR["store"], ops[:2] + [layout(ops[3]), ops[2]] + ops[4:]))
        elif op == NV["muladd"]:
            out.append((KHR["muladd"], ops))
        elif op == NV["length"]:
            out.append((KHR["length"], ops))
        else:
            out.append((op, ops))
        if op == OP_CONSTANT and ops[1] == scope_id:   # the new constants right after the scope's
            for (kind, value), cid in new_consts.items():
                out.append((OP_CONSTANT, [uint_type, cid, value]))
    result = header
    for op, ops in out:
        result += [(len(ops) + 1) << 16 | op] + ops
    return result


def check(words, constant_shapes=True):
    """What a KHR module must satisfy for the parts this rewrite writes (spirv-val 2023.1 predates the
    extension): uses, layouts and operand roles as SPV_KHR_cooperative_matrix defines them, and with
    constant_shapes (this rewrite's output) constant rows and columns whose products' shapes agree. Without it,
    also what glslang writes for GL_KHR_cooperative_matrix (llama.cpp's shaders: tests/test_spirv_coopmat_khr.py)."""
    header, insts = parse(words)
    problems = []
    ops_seen = {op for op, _ in insts}
    if ops_seen & set(NV.values()) or [CAP_NV] in [ops for op, ops in insts if op == OP_CAPABILITY]:
        problems.append("NV cooperative matrix instructions remain")
    if [CAP_KHR] not in [ops for op, ops in insts if op == OP_CAPABILITY]:
        problems.append("no CooperativeMatrixKHR capability")
    if EXT_KHR not in [decode_string(ops) for op, ops in insts if op == OP_EXTENSION]:
        problems.append("no SPV_KHR_cooperative_matrix extension")
    consts = {ops[1]: ops[2] for op, ops in insts if op == OP_CONSTANT and len(ops) == 3}
    spec = {ops[1] for op, ops in insts if op == OP_SPEC_CONSTANT}
    types = {ops[0]: ops for op, ops in insts if op == KHR["type"]}
    if not types:
        problems.append("no KHR cooperative matrix type")
    typeof = value_types(insts)
    for t, (_, comp, scope, rows, cols, use) in types.items():
        if consts.get(use) not in (USE_A, USE_B, USE_ACCUMULATOR):
            problems.append(f"type %{t}: its use is not a constant 0-2")
        if constant_shapes and (rows in spec or cols in spec or rows not in consts or cols not in consts):
            problems.append(f"type %{t}: rows and columns must be constants")
    for op, ops in insts:
        if op == KHR["muladd"]:
            rt, _, a, b, c = ops[:5]
            ta, tb, tc = typeof.get(a), typeof.get(b), typeof.get(c)
            if any(x not in types for x in (rt, ta, tb, tc)):
                problems.append("a product's operand is not a cooperative matrix")
                continue
            use = lambda t: consts[types[t][5]]
            dim = lambda t, i: consts[types[t][i]]
            if (use(ta), use(tb), use(tc), use(rt)) != (USE_A, USE_B, USE_ACCUMULATOR, USE_ACCUMULATOR) or tc != rt:
                problems.append("a product's operands are not A, B and the result's accumulator type")
            elif constant_shapes and not (dim(ta, 3) == dim(tc, 3) and dim(ta, 4) == dim(tb, 3) and dim(tb, 4) == dim(tc, 4)):
                problems.append("a product's shapes are not M x K, K x N and M x N")
        elif op in (KHR["load"], KHR["store"]):
            lay = ops[3] if op == KHR["load"] else ops[2]
            if consts.get(lay) not in (ROW_MAJOR, COLUMN_MAJOR):
                problems.append("a load or store's layout is not a RowMajor or ColumnMajor constant")
    if max(list(typeof) + [0]) >= header[3]:
        problems.append("a result id is not below the module's bound")
    return problems


def main(argv):
    if len(argv) == 3 and argv[2] == "--check":
        with open(argv[1], "rb") as f:
            data = f.read()
        problems = check(list(struct.unpack(f"<{len(data) // 4}I", data)))
        for p in problems:
            print(f"{argv[1]}: {p}")
        return 1 if problems else 0
    if len(argv) != 3:
        fail("usage: spirv_coopmat_khr.py IN.spv OUT.spv | IN.spv --check")
    with open(argv[1], "rb") as f:
        data = f.read()
    words = rewrite(list(struct.unpack(f"<{len(data) // 4}I", data)))
    problems = check(words)
    if problems:
        fail("; ".join(problems))
    with open(argv[2], "wb") as f:
        f.write(struct.pack(f"<{len(words)}I", *words))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
