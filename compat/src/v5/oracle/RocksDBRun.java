package oracle;

import java.io.File;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.RocksDBMessageStore;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.stats.BrokerStatsManager;

/**
 * A store whose consume queues are only in RocksDB (broker.conf storeType=defaultRocksDB), built as
 * BrokerController#initializeMessageStore builds it (RocksDBMessageStore, its RocksDBConsumeQueueStore
 * in consumequeue/):
 *
 *   oracle.RocksDBRun write   STORE_DIR BROKER_CONF N SEED halt|shutdown [M]
 *   oracle.RocksDBRun restart STORE_DIR BROKER_CONF
 *
 * write: load(), start(), N puts (ModeStores#put), the dispatch waited for; with M, the RocksDB
 * queue flushed (ConsumeQueueStoreInterface#flush: its memtables to SST files) and M more puts
 * dispatched; then Runtime.halt as a kill -9 (RocksDB keeps what it flushed: the queue writes
 * without its WAL) or a clean shutdown(). Prints the acked puts and the max phy offset.
 * restart: load(), start(), the reput waited for; prints the recovery path, min/max phy offset and
 * every queue of ModeStores#TOPICS the broker serves (its RocksDB queue is filled lazily, so each is
 * looked up by name: DefaultMessageStore#findConsumeQueue); shutdown().
 */
public final class RocksDBRun {
    private RocksDBRun() {
    }

    public static void main(String[] args) {
        ModeRun.main(args, RocksDBRun::write, RocksDBRun::restart);
    }

    static DefaultMessageStore open(File root, File conf) throws Exception {
        Stores s = new Stores(root, conf);
        if (!"defaultRocksDB".equalsIgnoreCase(s.config.getStoreType())) {
            throw new IllegalStateException("broker.conf must set storeType=defaultRocksDB");
        }
        // Stores' file store is left unloaded and unstarted (its shutdown() would delete abort)
        return new RocksDBMessageStore(s.config, new BrokerStatsManager(s.brokerConfig.getBrokerClusterName(),
            s.brokerConfig.isEnableDetailStat()), null, s.brokerConfig, new ConcurrentHashMap<>());
    }

    static void write(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        int n = Integer.parseInt(args[3]);
        Random rnd = new Random(Long.parseLong(args[4]));
        DefaultMessageStore store = open(root, new File(args[2]));
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + root);
        }
        store.start();
        List<Object> acked = ModeStores.put(store, rnd, 0, n);
        ModeStores.waitDispatched(store);
        if (args.length > 6) {
            store.getQueueStore().flush();
            acked.addAll(ModeStores.put(store, rnd, n, Integer.parseInt(args[6])));
            ModeStores.waitDispatched(store);
        }
        ModeStores.endWrite(store, acked, args[5]);
    }

    static void restart(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("recoveryPath", new File(root, "abort").exists() ? "abnormal" : "normal");
        DefaultMessageStore store = open(root, new File(args[2]));
        ModeStores.restarted(store, j, RocksDBRun::queues);
    }

    /** topic -> queueId -> {minOffset, maxOffset, entries: [{q, phy, size, tags}]}, the non-empty ones. */
    static Map<String, Map<String, Object>> queues(DefaultMessageStore store) throws Exception {
        Map<String, Map<String, Object>> out = new TreeMap<>();
        for (int t = 0; t < ModeStores.TOPICS.length; t++) {
            Map<String, Object> byId = new TreeMap<>();
            for (int qid = 0; qid < ModeStores.QUEUES[t]; qid++) {
                String topic = ModeStores.TOPICS[t];
                ConsumeQueueInterface cq = store.findConsumeQueue(topic, qid);
                long min = store.getMinOffsetInQueue(topic, qid);
                long max = store.getMaxOffsetInQueue(topic, qid);
                List<Object> entries = ModeStores.entries(cq, min, max);
                if (max > 0 || min > 0) {
                    Map<String, Object> q = new LinkedHashMap<>();
                    q.put("minOffset", min);
                    q.put("maxOffset", max);
                    q.put("entries", entries);
                    byId.put(String.valueOf(qid), q);
                }
            }
            if (!byId.isEmpty()) {
                out.put(ModeStores.TOPICS[t], byId);
            }
        }
        return out;
    }
}
