"""Read a W&B offline run file (``run-<id>.wandb``) back without the network or the wandb service.

The file is a W&B header (":W&B", magic 0xBEE1, version 0) followed by a LevelDB-style log: 32 KiB blocks
of chunks, each with a 7-byte header (CRC32, little-endian length, type: full/first/middle/last) carrying
serialised ``wandb_internal_pb2.Record`` protobuf messages. Used by tests (a run really was logged) and by
ingestion of W&B offline runs.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass, field
from pathlib import Path

HEADER = b":W&B"
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@dataclass
class OfflineRun:
    run_id: str = ""
    group: str = ""
    tags: list = field(default_factory=list)
    config: dict = field(default_factory=dict)
    history: list[dict] = field(default_factory=list)
    summary: dict = field(default_factory=dict)
    exit_code: int | None = None


def raw_records(path: Path) -> list[bytes]:
    data = Path(path).read_bytes()
    if data[:4] != HEADER or struct.unpack("<H", data[4:6])[0] != 0xBEE1:
        raise ValueError(f"{path}: not a W&B run file (bad header)")
    records, pending, pos = [], b"", 7
    while pos + 7 <= len(data):
        room = BLOCK - pos % BLOCK
        if room < 7:  # block trailer padding
            pos += room
            continue
        length, kind = struct.unpack("<HB", data[pos + 4: pos + 7])
        chunk = data[pos + 7: pos + 7 + length]
        pos += 7 + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            records.append(pending + chunk)
            pending = b""
        else:  # zero padding at the end of the file
            break
    return records


def _value(json_text: str):
    try:
        return json.loads(json_text)
    except ValueError:
        return json_text


def read_offline_run(path: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2 as pb

    run = OfflineRun()
    for raw in raw_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.group, run.tags = record.run.run_id, record.run.run_group, list(record.run.tags)
            run.config.update({i.key: _value(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            run.config.update({i.key: _value(i.value_json) for i in record.config.update})
        elif kind == "history":
            run.history.append({i.key or "/".join(i.nested_key): _value(i.value_json) for i in record.history.item})
        elif kind == "summary":
            run.summary.update({i.key or "/".join(i.nested_key): _value(i.value_json) for i in record.summary.update})
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def find_offline_runs(directory: Path) -> list[Path]:
    return sorted(Path(directory).glob("**/offline-run-*/run-*.wandb"))
