package oracle;

import java.io.File;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.rocketmq.store.DefaultMessageStore;

/**
 * A 5.3.x store in RocksDB double-write (broker.conf rocksdbCQDoubleWriteEnable=true,
 * storeType=default), wired as BrokerController#initializeMessageStore wires it: the file store,
 * then DefaultMessageStore#enableRocksdbCQWrite (a RocksDBMessageStore whose RocksDB consume queue
 * lives in consumequeue/ beside the topic directories, fed by an extra dispatcher):
 *
 *   oracle.DoubleWriteRun write   STORE_DIR BROKER_CONF N SEED halt|shutdown
 *   oracle.DoubleWriteRun restart STORE_DIR BROKER_CONF
 *
 * write: load(), start(), N puts (ModeStores#put), the dispatch waited for, then Runtime.halt
 * as a kill -9 (the RocksDB queue keeps what it flushed) or a clean shutdown() (which flushes it).
 * Prints (Json) the acked puts and the store's max phy offset.
 * restart: the same wiring, load(), start(), the reput waited for; prints the recovery path,
 * min/max phy offset and every (file) queue the broker serves (ModeStores#queues); shutdown().
 * 5.4+ has no enableRocksdbCQWrite: its DefaultMessageStore builds the CombineConsumeQueueStore
 * from the same setting.
 */
public final class DoubleWriteRun {
    private DoubleWriteRun() {
    }

    public static void main(String[] args) {
        ModeRun.main(args, DoubleWriteRun::write, DoubleWriteRun::restart);
    }

    static Stores open(File root, File conf) throws Exception {
        Stores s = new Stores(root, conf);
        if (!s.config.isRocksdbCQDoubleWriteEnable()) {
            throw new IllegalStateException("broker.conf must set rocksdbCQDoubleWriteEnable=true");
        }
        try {        // 5.3: BrokerController#initializeMessageStore's call
            DefaultMessageStore.class.getMethod("enableRocksdbCQWrite").invoke(s.store);
        } catch (NoSuchMethodException e) {
            // 5.4+: the constructor already chose CombineConsumeQueueStore
        }
        return s;
    }

    static void write(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        int n = Integer.parseInt(args[3]);
        Random rnd = new Random(Long.parseLong(args[4]));
        DefaultMessageStore store = open(root, new File(args[2])).store;
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + root);
        }
        store.start();
        List<Object> acked = ModeStores.put(store, rnd, 0, n);
        ModeStores.waitDispatched(store);
        ModeStores.endWrite(store, acked, args[5]);
    }

    static void restart(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("recoveryPath", new File(root, "abort").exists() ? "abnormal" : "normal");
        DefaultMessageStore store = open(root, new File(args[2])).store;
        ModeStores.restarted(store, j, ModeStores::queues);
    }
}
