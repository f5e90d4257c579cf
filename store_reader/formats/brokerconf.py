"""Broker settings that decide how store files are laid out and how the broker recovers them.

Read from a RocketMQ ``broker.conf`` (Java properties form); every setting the file omits takes the
broker's default (``MessageStoreConfig`` / ``BrokerConfig``, spec ``store-format.md`` §2, §7, §3.9 and
``recovery.md`` preamble).
"""
from __future__ import annotations

import dataclasses
import io
import re
from dataclasses import dataclass, field

from store_reader.formats.consumequeue import logic_offset_of, slot_of
from store_reader.exceptions import ConfigError
from store_reader.formats.indexfile import index_file_size
from store_reader.io.storefs import PathRef, location, open_regular

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

_DELAY_UNITS_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


@dataclass(frozen=True)
class BrokerConfig:
    """The subset of broker settings this tool needs, with the broker's defaults."""

    mappedFileSizeCommitLog: int = 1024 * 1024 * 1024
    mappedFileSizeConsumeQueue: int = logic_offset_of(300_000)
    mappedFileSizeConsumeQueueExt: int = 48 * 1024 * 1024
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 5_000_000 * 4
    messageIndexEnable: bool = True
    messageIndexSafe: bool = False
    checkCRCOnRecover: bool = True
    forceVerifyPropCRC: bool = False
    enabledAppendPropCRC: bool = False
    duplicationEnable: bool = False
    enableConsumeQueueExt: bool = False
    enableMultiDispatch: bool = False
    enableLmq: bool = False
    autoMessageVersionOnTopicLen: bool = True
    recheckReputOffsetFromCq: bool = False
    commitLogRecoverMaxNum: int = 10           # [5.4] files the start-file search looks at (R§4.1)
    checkCommitLogOffsetOnRecover: bool = False  # [5.5] abnormal walk checks PHYSICALOFFSET (R§4.3)
    enableAcceleratedRecovery: bool = False    # [5.5] abnormal walk from logicsPhysicalOffset: refused
    indexRocksDBEnable: bool = False           # [5.5] extra dispatch stores (commitLogDispatchStores): refused
    transRocksDBEnable: bool = False
    offsetCheckInSlave: bool = False
    maxMsgsNumBatch: int = 64
    flushDiskType: str = "ASYNC_FLUSH"
    brokerRole: str = "ASYNC_MASTER"
    storeType: str = "default"
    rocksdbCQDoubleWriteEnable: bool = False
    useSeparateStorePathForRocksdbCQ: bool = False    # [5.5] the RocksDB CQ in consumequeue_rocksdb/
    combineCQLoadingCQTypes: str = "default;defaultRocksDB"      # 5.4+ CombineConsumeQueueStore
    combineCQPreferCQType: str = "default"
    combineAssignOffsetCQType: str = "default"
    combineCQMaxExtraSearchCommitLogFiles: int = 3
    combineCQUseRocksdbForLmq: bool = False      # [5.5] the RocksDB queue must match (R§15.2)
    configManagerVersion: str = "v1"
    useSingleRocksDBForAllConfigs: bool = False  # [5.4] v1 RocksDB configs in one config/metadata
    enableDLegerCommitLog: bool = False
    dLegerSelfId: str = "n0"                  # its entries in dledger-<dLegerSelfId>/ (F§16.1)
    dLegerPeers: str = "n0-localhost:40911"   # the group's members, ';'-separated
    storePathDLedgerCommitLog: str | None = None
    enableControllerMode: bool = False
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    timerWheelEnable: bool = True              # 5.x timer store (store-format §16)
    mappedFileSizeTimerLog: int = 100 * 1024 * 1024
    timerPrecisionMs: int = 1000
    timerWheelSnapshotFlush: bool = False      # 5.4+
    timerRocksDBEnable: bool = False           # 5.4+
    storePathRootDir: str | None = None
    storePathCommitLog: str | None = None
    source: str | None = field(default=None, compare=False)
    """Path of the broker.conf the values came from (None = all defaults)."""
    ignored_after_bom: str | None = field(default=None, compare=False)
    """A setting on the broker.conf's first line that a UTF-8 byte order mark before it hides: the
    broker reads the file as ISO-8859-1, so the key it sees starts with the mark's three bytes and
    it keeps its default, as this tool does; said in messages about sizes that do not fit."""

    @property
    def settings_hint(self) -> str:
        """What to do when files do not fit these settings."""
        if self.ignored_after_bom:
            return (f"{self.source} starts with a UTF-8 byte order mark: the broker, like this tool, "
                    f"does not see its first setting {self.ignored_after_bom} and uses the default; "
                    "remove the mark")
        return "pass the broker's broker.conf"

    # -- derived values -------------------------------------------------------------------------

    @property
    def cq_file_size(self) -> int:
        """``getMappedFileSizeConsumeQueue`` rounds the configured value up to a multiple of 20."""
        size = self.mappedFileSizeConsumeQueue
        return logic_offset_of(-slot_of(-size))         # whole slots, rounded up

    @property
    def index_file_size(self) -> int:
        return index_file_size(self.maxHashSlotNum, self.maxIndexNum)

    @property
    def delay_levels_ms(self) -> list[int]:
        """Delay in ms of level 1..N (``parseDelayLevel``); index 0 is level 1."""
        out = []
        for token in self.messageDelayLevel.split(" "):
            if not token:
                continue
            unit = token[-1]
            if unit not in _DELAY_UNITS_MS or not token[:-1].isdigit():
                raise ConfigError(f"messageDelayLevel token {token!r} is not <number><s|m|h|d>",
                                  self.source)
            out.append(int(token[:-1]) * _DELAY_UNITS_MS[unit])
        return out

    @property
    def is_slave(self) -> bool:
        return self.brokerRole.upper() == "SLAVE"

    def replace(self, **changes: object) -> "BrokerConfig":
        return dataclasses.replace(self, **changes)


_FIELDS = {f.name: f for f in dataclasses.fields(BrokerConfig) if f.name not in ("source", "ignored_after_bom")}
_BOM = "\ufeff"


def _convert(name: str, raw: str, path: str) -> object:
    kind = _FIELDS[name].type
    if kind == "bool":
        low = raw.strip().lower()
        if low not in ("true", "false"):
            raise ConfigError(f"{name}={raw!r} is not true/false", path)
        return low == "true"
    if kind == "int":
        try:
            return int(raw.strip())
        except ValueError:
            raise ConfigError(f"{name}={raw!r} is not an integer", path) from None
    return raw.strip()


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text (``key=value`` / ``key: value``, ``#``/``!`` comments)."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        while line.endswith("\\") and i < len(lines):  # continuation line
            line = line[:-1] + lines[i].lstrip()
            i += 1
        m = re.match(r"((?:[^=:\s\\]|\\.)+)\s*[=:\s]\s*(.*)$", line)
        if m:
            out[m.group(1).replace("\\", "")] = m.group(2).rstrip()
        else:
            out[line.strip()] = ""
    return out


def load_broker_config(path: PathRef | None = None, **overrides: object) -> BrokerConfig:
    """Read a ``broker.conf``; unknown keys are ignored (they do not affect the store).

    Parameters
    ----------
    path
        The broker.conf file (a local path, or a ``storefs.StoreLocation`` / URI), or None for the
        broker's defaults.
    overrides
        Explicit values that win over the file (used by tests and the CLI).
    """
    values: dict[str, object] = {}
    source = None
    if path is not None:
        loc = location(path)
        source = loc.path if loc.filesystem is None else str(loc)
        try:
            if loc.filesystem is None:
                with io.TextIOWrapper(open_regular(source, "broker config"), encoding="utf-8",
                                      errors="replace") as fh:
                    text = fh.read()
            else:
                text = loc.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            raise ConfigError(f"cannot read broker config: {exc.strerror}", source) from None
        for key, raw in parse_properties(text).items():
            if key in _FIELDS:
                values[key] = _convert(key, raw, source)
            elif key.startswith(_BOM) and key[1:] in _FIELDS and key[1:] not in overrides:
                values["ignored_after_bom"] = f"{key[1:]}={raw}"
    values.update(overrides)
    cfg = BrokerConfig(**values, source=source)  # type: ignore[arg-type]
    for name in ("mappedFileSizeCommitLog", "mappedFileSizeConsumeQueue", "maxHashSlotNum", "maxIndexNum"):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name} must be positive, got {getattr(cfg, name)}", source)
    cfg.delay_levels_ms  # validate early
    return cfg


def broker_config_of(source: BrokerConfig | PathRef | None) -> BrokerConfig:
    """A ``BrokerConfig`` as given, read from a broker.conf, or the broker's defaults (None)."""
    return source if isinstance(source, BrokerConfig) else load_broker_config(source)
