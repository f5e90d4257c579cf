"""One walk of a store directory: every entry a 4.9.x-5.5.x broker writes, classified (spec
``store-format.md`` §1, §11; ``recovery.md`` §15), the modes the store uses, the entries no broker
writes, and the features this project refuses by name (``Inventory.refuse``).

The walk (``fsutil.walk_tree``: one recursive listing) is also what run ids and manifests
fingerprint (``Inventory.files``), so a run lists the store once. ``open_store`` takes it and
refuses a store whose refusal is not None before anything reads a byte; the findings (entries no
broker writes) go to ``dump --verify`` and the audit's ``store_findings`` through
``audit.files.verify_inventory``.

Where each entry comes from (the release sources, ``-sources`` jars of rocketmq-store, -broker and
-common): ``StorePathConfigHelper``, ``BrokerPathConfigHelper``, ``MessageStoreConfig``
(``getStorePathEpochFile``, ``getStorePathBrokerIdentity``), ``TimerMessageStore``
(``timerwheel``, ``timerlog``), ``CompactionStore`` / ``CompactionPositionMgr``,
``RocksDBConsumeQueueStore`` (``consumequeue/`` or, 5.5 ``useSeparateStorePathForRocksdbCQ``,
``consumequeue_rocksdb/``), ``RocksDB*ConfigManager#rocksdbConfigFilePath``, ``ConfigStorage``
(``config/rdb``), ``MessageRocksDBStorage`` (``rocksdbstore``, 5.5), ``PopConsumerService``
(``kvStore``), DLedger's ``DLedgerConfig`` (``dledger-<selfId>/``).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Sequence

from store_reader.formats.brokerconf import BrokerConfig
from store_reader.formats.controller import EPOCH_FILE, IDENTITY_FILES, IDENTITY_TEMP_FILE
from store_reader.exceptions import UnsupportedStoreError
from store_reader.io.fsutil import walk_tree
from store_reader.io.storefs import PathRef

# The modes a store can show (``Inventory.modes``), in the order the report lists them.
TIMER = "timer"                        # timerwheel, timerlog/, config/timercheck (5.x timerWheelEnable)
CONTROLLER = "controller"              # epochFileCheckpoint, brokerIdentity (5.x enableControllerMode)
DLEDGER = "dledger"                    # dledger-<selfId>/ (enableDLegerCommitLog)
ROCKSDB_CQ = "rocksdb_cq"              # consume queues served from RocksDB (storeType=defaultRocksDB)
ROCKSDB_CQ_DOUBLE_WRITE = "rocksdb_cq_double_write"   # RocksDB beside the served file CQ
ROCKSDB_CONFIG = "rocksdb_config"      # topics / groups / consumer offsets in RocksDB
ROCKSDB_MESSAGE = "rocksdb_message"    # rocksdbstore/ (5.5: index, timer, trans column families)
POP_ROCKSDB = "pop_rocksdb"            # kvStore/ (5.x pop consumer records)
COMPACTION = "compaction"              # compaction/compactionLog, compactionCq (compacted topics)
BATCH_CQ = "batch_cq"                  # batchconsumequeue/ (5.x queue.type=BatchCQ topics)
CQ_EXT = "cq_ext"                      # consumequeue_ext/ (enableConsumeQueueExt)
MODES = (TIMER, CONTROLLER, DLEDGER, ROCKSDB_CQ, ROCKSDB_CQ_DOUBLE_WRITE, ROCKSDB_CONFIG,
         ROCKSDB_MESSAGE, POP_ROCKSDB, COMPACTION, BATCH_CQ, CQ_EXT)

# What makes a directory a store root (``open_store``).
STORE_MARKERS = {"commitlog", "consumequeue", "index", "checkpoint", "config", "dledger"}

# Files a RocksDB database directory holds (RocksDB's own names).
_ROCKSDB_NAMES = ("CURRENT", "IDENTITY", "LOCK", "LOG", "LOG.old.*", "MANIFEST-*", "OPTIONS-*",
                  "*.sst", "*.log", "*.blob", "*.dbtmp")

# config/ (BrokerPathConfigHelper, StorePathConfigHelper): each also as .bak (MixAll.string2File)
# and, 4.9.7 after a crash during persist, .tmp
_CONFIG_FILES = {
    "topics.json": "config", "consumerOffset.json": "config", "lmqConsumerOffset.json": "config",
    "delayOffset.json": "config", "subscriptionGroup.json": "config",
    "consumerFilter.json": "config", "topicQueueMapping.json": "config",
    "consumerOrderInfo.json": "config", "messageRequestMode.json": "config",
    "transactionMetrics": "config", "broker.properties": "config",
    "timercheck": "timer.check", "timermetrics": "timer.metrics",
}
# RocksDB config stores under config/: v1 managers (storeType=defaultRocksDB; ``metadata`` with
# useSingleRocksDBForAllConfigs) and v2 ConfigStorage (configManagerVersion=v2)
_CONFIG_ROCKSDB_DIRS = ("consumerOffsets", "topics", "subscriptionGroups", "metadata", "rdb")

_ROOT_FILES = {
    "checkpoint": ("checkpoint", None), "abort": ("abort", None), "abort.bak": ("abort", None),
    "lock": ("lock", None),
    "broker.conf": ("broker.conf", None),          # this project's convention: the store's broker.conf
    "MANIFEST.json": ("manifest", None),           # a store this project repaired
    "timerwheel": ("timer.wheel", TIMER),
    EPOCH_FILE: ("controller.epoch", CONTROLLER),
    EPOCH_FILE + ".bak": ("controller.epoch", CONTROLLER),
    **{name: ("controller.identity", CONTROLLER) for name in IDENTITY_FILES + (IDENTITY_TEMP_FILE,)},
}
_ROOT_DIRS = {
    "commitlog": ("commitlog", None), "consumequeue": ("consumequeue", None),
    "index": ("index", None), "config": ("config", None),
    "timerlog": ("timer.log", TIMER),
    "consumequeue_ext": ("consumequeue_ext", CQ_EXT),
    "batchconsumequeue": ("batchconsumequeue", BATCH_CQ),
    "consumequeue_rocksdb": ("rocksdb.consumequeue", None),   # its mode decided by the config
    "compaction": ("compaction", None),                        # compaction/position-checkpoint alone: unused
    "rocksdbstore": ("rocksdb.message", ROCKSDB_MESSAGE),
    "kvStore": ("rocksdb.pop", POP_ROCKSDB),
    "transaction": ("transaction", None),                      # 4.x statetable/redolog paths
}


def is_rocksdb_file(name: str) -> bool:
    """A name RocksDB writes into its database directory."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in _ROCKSDB_NAMES)


@dataclass(frozen=True)
class Entry:
    """One entry of the store, as the walk classified it."""

    path: str                 # relative to the store root, '/'-separated
    kind: str                 # what it is (``commitlog``, ``config``, ``timer.wheel``, ...); ``unknown``
    is_dir: bool


@dataclass
class Inventory:
    """Every entry of one store directory, classified (``take``)."""

    files: list[tuple[str, int, int]]
    """Every file under the root: (relative path, size, mtime ns), what run ids and manifests hash."""
    entries: list[Entry]
    """The root's entries and those of ``config/``, ``consumequeue/`` and ``compaction/``, classified."""
    modes: tuple[str, ...]
    """The modes the store uses (``MODES``, in that order)."""
    rocksdb_cq_dir: str | None = None
    """Where a RocksDB consume queue database lies (``consumequeue`` or ``consumequeue_rocksdb``)."""
    cq_served_by: str = "file"
    """Which consume queue the broker serves: ``file`` or ``rocksdb`` (``storeType``)."""
    offsets_in: str = "json"
    """Where the broker reads committed consumer offsets: ``json`` (``consumerOffset.json``) or
    ``rocksdb`` (``config/consumerOffsets``, ``RocksDBConsumerOffsetManager``)."""
    refusals: list[tuple[str, str]] = field(default_factory=list)
    """(entry, why this project cannot recover it exactly), the first one is raised by ``refuse``."""

    @property
    def unknown(self) -> list[Entry]:
        """Entries no broker 4.9.x-5.5.x writes."""
        return [e for e in self.entries if e.kind == "unknown"]

    def kinds(self) -> set[str]:
        return {e.kind for e in self.entries}

    def has(self, mode: str) -> bool:
        return mode in self.modes

    def modes_text(self) -> str:
        """The modes as one word list (``classic`` when none)."""
        return ", ".join(self.modes) or "classic"

    @property
    def dledger_dirs(self) -> list[str]:
        """The root's ``dledger-<selfId>`` directories (F§16.1)."""
        return [e.path for e in self.entries if e.kind == "dledger"]

    def refuse(self, root: PathRef, read_dledger: bool = False) -> None:
        """Raise the first refusal (one line naming the feature and its entry), if any.
        ``read_dledger``: the caller reads a DLedger store's entries (the refusal of its
        ``dledger-<selfId>`` directory does not apply; ``store.open_store``)."""
        for entry, why in self.refusals:
            if read_dledger and DLEDGER in self.modes and entry in self.dledger_dirs:
                continue
            raise UnsupportedStoreError(why, f"{str(root).rstrip('/')}/{entry}")


def _classify_root(name: str, is_dir: bool, commitlog_names: Sequence[str]) -> tuple[str, str | None]:
    if is_dir and name in commitlog_names:
        return "commitlog", None
    if is_dir and name.startswith("dledger-"):
        return "dledger", DLEDGER
    known = (_ROOT_DIRS if is_dir else _ROOT_FILES).get(name)
    return known if known is not None else ("unknown", None)


def _classify_config(name: str, is_dir: bool) -> str:
    if is_dir:
        return "rocksdb.config" if name in _CONFIG_ROCKSDB_DIRS else "unknown"
    for suffix in (".bak", ".tmp", ""):
        if name.endswith(suffix) and name[:len(name) - len(suffix)] in _CONFIG_FILES:
            return _CONFIG_FILES[name[:len(name) - len(suffix)]]
    return "unknown"


def take(root: PathRef, config: BrokerConfig, commitlog_names: Sequence[str] = ("commitlog",)
         ) -> Inventory:
    """Walk the store at ``root`` once and classify what is there.

    ``commitlog_names``: the root's sub-directories that are commitlog directories
    (``storePathCommitLog``). Which RocksDB consume queue is served, and whether RocksDB config
    stores are in use, follows the broker's settings (``config``) as the release sources choose
    them (``docs/spec/recovery.md`` §15).
    """
    files, dirs = walk_tree(root)
    # an object store lists a directory only where one was made: a file's parents are directories
    all_dirs = {d.replace("\\", "/") for d in dirs}
    for rel, _, _ in files:
        parts = rel.replace("\\", "/").split("/")[:-1]
        all_dirs.update("/".join(parts[:i]) for i in range(1, len(parts) + 1))
    children: dict[str, set[tuple[str, bool]]] = {}
    for rel in all_dirs:
        parent, _, name = rel.rpartition("/")
        children.setdefault(parent, set()).add((name, True))
    for rel, _, _ in files:
        parent, _, name = rel.replace("\\", "/").rpartition("/")
        children.setdefault(parent, set()).add((name, False))

    def listing(d: str) -> list[tuple[str, bool]]:
        return sorted(children.get(d, ()))

    entries: list[Entry] = []
    modes: set[str] = set()
    for name, is_dir in listing(""):
        kind, mode = _classify_root(name, is_dir, commitlog_names)
        entries.append(Entry(name, kind, is_dir))
        if mode is not None:
            modes.add(mode)
    for name, is_dir in listing("config"):
        kind = _classify_config(name, is_dir)
        entries.append(Entry(f"config/{name}", kind, is_dir))
        if kind.startswith("timer."):
            modes.add(TIMER)
    for name, is_dir in listing("compaction"):
        # position-checkpoint alone is written by every 5.x store (enableCompaction); logs and
        # their queues only for topics with cleanup.policy=COMPACTION
        kind = "compaction" if name in ("position-checkpoint", "position-checkpoint.bak") else \
            "compaction.log" if name in ("compactionLog", "compactionCq") and listing(f"compaction/{name}") \
            else "compaction" if name in ("compactionLog", "compactionCq") else "unknown"
        entries.append(Entry(f"compaction/{name}", kind, is_dir))
        if kind == "compaction.log":
            modes.add(COMPACTION)
    rocksdb_in: list[str] = []
    for d in ("consumequeue", "consumequeue_rocksdb"):
        db = [n for n, is_dir in listing(d) if not is_dir and is_rocksdb_file(n)]
        if db:
            rocksdb_in.append(d)
        for name, is_dir in listing(d):
            # consumequeue/: a directory per topic; RocksDB's files where the RocksDB CQ shares it
            kind = "consumequeue.topic" if is_dir and d == "consumequeue" else \
                "rocksdb.consumequeue" if not is_dir and is_rocksdb_file(name) else \
                "rocksdb.consumequeue" if d == "consumequeue_rocksdb" else "unknown"
            entries.append(Entry(f"{d}/{name}", kind, is_dir))
    inv = Inventory(files=files, entries=entries, modes=())
    _decide(inv, config, modes, rocksdb_in, listing)
    inv.modes = tuple(m for m in MODES if m in modes)
    return inv


def _decide(inv: Inventory, config: BrokerConfig, modes: set[str], rocksdb_in: list[str],
            listing) -> None:
    """The modes the settings add, which consume queue the broker serves, and the refusals."""
    rocksdb_store = config.storeType.lower() == "defaultrocksdb"    # StoreType.DEFAULT_ROCKSDB
    if config.enableDLegerCommitLog:
        modes.add(DLEDGER)
    if config.enableControllerMode:
        modes.add(CONTROLLER)
    if rocksdb_in:
        inv.rocksdb_cq_dir = rocksdb_in[0]
    # 5.4+ CombineConsumeQueueStore: the file queue is read (combineCQPreferCQType) and assigns
    # queue offsets (combineAssignOffsetCQType) unless set to defaultRocksDB; 5.3 double-write
    # always serves the file queue (the RocksDB one is an extra dispatcher)
    combine = [config.combineCQPreferCQType, config.combineAssignOffsetCQType]
    file_cq_served = all(t.strip().lower() == "default" for t in combine) and "default" in \
        [t.strip().lower() for t in config.combineCQLoadingCQTypes.split(";")]
    if rocksdb_store or (config.rocksdbCQDoubleWriteEnable and not file_cq_served):
        inv.cq_served_by = "rocksdb"
        modes.add(ROCKSDB_CQ)
    elif config.rocksdbCQDoubleWriteEnable or rocksdb_in:
        modes.add(ROCKSDB_CQ_DOUBLE_WRITE if config.rocksdbCQDoubleWriteEnable else ROCKSDB_CQ)
    rocksdb_config = [f"config/{n}" for n, is_dir in listing("config")
                      if is_dir and n in _CONFIG_ROCKSDB_DIRS and
                      any(is_rocksdb_file(f) for f, d in listing(f"config/{n}") if not d)]
    # the broker reads consumer offsets, topics and groups from RocksDB with storeType=defaultRocksDB
    # (v1 RocksDB*ConfigManager) or configManagerVersion=v2 (ConfigStorage, config/rdb); otherwise
    # from the .json files, whatever RocksDB directories an earlier setting left behind
    offsets_in_rocksdb = rocksdb_store or config.configManagerVersion.lower() == "v2"
    if rocksdb_config or offsets_in_rocksdb:
        modes.add(ROCKSDB_CONFIG)

    refuse = inv.refusals.append
    dledger = next((e.path for e in inv.entries if e.kind == "dledger"), None)
    if DLEDGER in modes:
        refuse((dledger or "commitlog",
                "a DLedger store (enableDLegerCommitLog): its commitlog is DLedger's entry log "
                f"({dledger or 'dledger-<selfId>'}/data); this project reads it and predicts its "
                "restart and audits it (dump, dump --verify, audit, recover --dry-run, salvage, the "
                "rocketmq data source) but does not repair it"))
    if ROCKSDB_CQ in modes:
        where = inv.rocksdb_cq_dir or "consumequeue"
        # [5.5] RocksDBConsumeQueueStore opens consumequeue_rocksdb/ with
        # useSeparateStorePathForRocksdbCQ, else consumequeue/ (and refuses to start on a database
        # in the other one; 5.3/5.4 ignore it)
        served = "consumequeue_rocksdb" if config.useSeparateStorePathForRocksdbCQ else "consumequeue"
        if rocksdb_store and any(d != served for d in rocksdb_in):
            why = (f"a RocksDB consume queue in {where}/ but the broker.conf's "
                   f"useSeparateStorePathForRocksdbCQ={str(config.useSeparateStorePathForRocksdbCQ).lower()} "
                   f"opens {served}/: a 5.5 broker refuses to start on it, an older one ignores it")
            where = next(d for d in rocksdb_in if d != served)
        elif rocksdb_store:
            inv.rocksdb_cq_dir = served
            why = None      # read (rocksdbcq), predicted and repaired (R§15.1)
        elif config.rocksdbCQDoubleWriteEnable:
            why = ("consume queues served from RocksDB (rocksdbCQDoubleWriteEnable with "
                   f"combineCQPreferCQType={config.combineCQPreferCQType}, combineAssignOffsetCQType="
                   f"{config.combineAssignOffsetCQType}, combineCQLoadingCQTypes="
                   f"{config.combineCQLoadingCQTypes}): the broker reads {where}/ through "
                   "CombineConsumeQueueStore, which this project does not model")
        else:
            why = (f"{where}/ holds a RocksDB consume queue but broker.conf sets neither "
                   "storeType=defaultRocksDB nor rocksdbCQDoubleWriteEnable=true: which consume "
                   "queue the broker serves is not known (pass the broker's broker.conf)")
        if why is not None:
            refuse((where, why))
    if BATCH_CQ in modes:
        refuse(("batchconsumequeue", "batch consume queues (batchconsumequeue/, queue.type=BatchCQ "
                "topics): this project rebuilds only classic consume queues"))
    if CQ_EXT in modes:
        refuse(("consumequeue_ext", "consume queue ext (consumequeue_ext/, enableConsumeQueueExt): "
                "its tags codes point into the ext files, which this project does not rebuild"))
    if COMPACTION in modes:
        refuse(("compaction", "compacted topics (compaction/compactionLog, cleanup.policy=COMPACTION): "
                "this project does not recover the compaction log"))
    # v1 RocksDBConsumerOffsetManager (storeType=defaultRocksDB): config/consumerOffsets, read
    # (rocksdbcq.read_consumer_offsets); its load merges consumerOffset.json only when the file's
    # dataVersion counter is above the database's (#merge), which is not compared here
    json_offsets = [f"config/{n}" for n, is_dir in listing("config")
                    if not is_dir and n in ("consumerOffset.json", "consumerOffset.json.bak")]
    if offsets_in_rocksdb and config.configManagerVersion.lower() == "v2":
        refuse(("config/rdb", "consumer offsets kept in RocksDB by configManagerVersion=v2 "
                "(ConfigStorage, config/rdb): this project reads them only as storeType=defaultRocksDB "
                "keeps them (config/consumerOffsets)"))
    elif offsets_in_rocksdb and config.useSingleRocksDBForAllConfigs:
        refuse(("config/metadata", "consumer offsets kept in the one RocksDB of every config "
                "(useSingleRocksDBForAllConfigs=true, config/metadata): this project reads them only "
                "from config/consumerOffsets"))
    elif offsets_in_rocksdb and json_offsets:
        refuse((json_offsets[0], "consumerOffset.json beside consumer offsets kept in RocksDB "
                "(storeType=defaultRocksDB): the broker takes the file instead of config/consumerOffsets "
                "only when the file's dataVersion counter is above the database's "
                "(RocksDBConsumerOffsetManager#merge), which this project does not compare"))
    elif offsets_in_rocksdb:
        inv.offsets_in = "rocksdb"
    if CONTROLLER in modes and not config.enableControllerMode and config.source is None:
        refuse((next((e.path for e in inv.entries if e.kind == "controller.epoch"), EPOCH_FILE),
                "controller-mode files (epochFileCheckpoint) and no broker.conf: whether the broker "
                "runs with enableControllerMode, which decides its confirm offset, is not known "
                "(pass the broker's broker.conf)"))
