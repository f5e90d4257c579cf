package oracle;

import java.io.File;
import java.util.ArrayList;
import java.util.Collections;
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
 * write: load(), start(), N puts (oracle.Write's plan), the dispatch waited for, then Runtime.halt
 * as a kill -9 (the RocksDB queue keeps what it flushed) or a clean shutdown() (which flushes it).
 * Prints (Json) the acked puts and the store's max phy offset.
 * restart: the same wiring, load(), start(), the reput waited for; prints the recovery path,
 * min/max phy offset and every (file) queue the broker serves (oracle.Restart#queues); shutdown().
 */
public final class DoubleWriteRun {
    private DoubleWriteRun() {
    }

    public static void main(String[] args) {
        Json.claimStdout();
        try {
            if ("write".equals(args[0])) {
                write(args);
            } else {
                restart(args);
            }
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    static Stores open(File root, File conf) throws Exception {
        Stores s = new Stores(root, conf);
        if (!s.config.isRocksdbCQDoubleWriteEnable()) {
            throw new IllegalStateException("broker.conf must set rocksdbCQDoubleWriteEnable=true");
        }
        s.store.enableRocksdbCQWrite();
        return s;
    }

    static void waitDispatched(DefaultMessageStore store) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 60_000L;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(2);
        }
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
        List<Object> acked = Collections.synchronizedList(new ArrayList<>());
        List<Object> refused = Collections.synchronizedList(new ArrayList<>());
        for (int i = 0; i < n; i++) {
            Write.put(store, rnd, i, acked, refused);
        }
        waitDispatched(store);
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("written", new ArrayList<>(acked));
        j.put("refused", refused);
        j.put("maxPhyOffset", store.getMaxPhyOffset());
        if ("shutdown".equals(args[5])) {
            store.shutdown();
            Json.emit(j);
            System.exit(0);
        }
        Json.emit(j);
        Runtime.getRuntime().halt(0);
    }

    static void restart(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("recoveryPath", new File(root, "abort").exists() ? "abnormal" : "normal");
        DefaultMessageStore store = open(root, new File(args[2])).store;
        boolean loaded = store.load();
        j.put("loadResult", loaded);
        if (loaded) {
            store.start();
            waitDispatched(store);
            j.put("minPhyOffset", store.getMinPhyOffset());
            j.put("maxPhyOffset", store.getMaxPhyOffset());
            j.put("queues", Restart.queues(store, root));
        }
        store.shutdown();
        Json.emit(j);
        System.exit(0);
    }
}
