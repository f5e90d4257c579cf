package oracle;

import java.io.File;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.ServerSocket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.TreeMap;

import io.openmessaging.storage.dledger.DLedgerServer;
import io.openmessaging.storage.dledger.store.file.DLedgerMmapFileStore;
import io.openmessaging.storage.dledger.store.file.MmapFileList;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.dledger.DLedgerCommitLog;

/**
 * A DLedger store (broker.conf enableDLegerCommitLog=true, a one-member group), 4.x and 5.x:
 *
 *   oracle.DLedgerRun write   STORE_DIR BROKER_CONF PUTS SEED END
 *   oracle.DLedgerRun restart BROKER_CONF STORE_DIR...
 *
 * The member's port in dLegerPeers is not stored on disk: both modes run with a free one (a copy
 * of BROKER_CONF in the store's parent directory).
 * write: load(), start() (DLedgerCommitLog#start = DLedgerServer#startup: the election), waits
 *   for LEADER, PUTS puts through DefaultMessageStore#putMessage planned by Random(SEED) (topics
 *   DLA (4 queues), DLB (2), DLC (1); TAGS, KEYS, UNIQ_KEY; bodies 20-1500 bytes), GroupX's
 *   committed offsets on every queue (oracle.Write#commitOffsets), then END:
 *   shutdown (a clean shutdown()) or halt (Runtime.halt after a seeded 0-300 ms, as a kill -9).
 * restart, each STORE_DIR in turn in this JVM (a store whose recovery calls System.exit ends it):
 *   load() (DLedgerMmapFileStore#load + #recover inside DLedgerCommitLog#recover), the
 *   DLedger state after it; start(), then what the broker's DLedgerRoleChangeHandler waits for as
 *   LEADER (committedIndex = ledgerEndIndex, no dispatch lag), recoverTopicQueueTable(); the
 *   state, every queue, queryMessage answers and the consumer offsets' pulls (oracle.Restart's
 *   queues, index, consumerOffsets); a clean shutdown() and the DLedger checkpoint
 *   and currterm files it leaves.
 * Prints one Json document (restart: {"runs": [one per store]}).
 */
public final class DLedgerRun {
    static final String[] TOPICS = {"DLA", "DLB", "DLC"};
    static final int[] QUEUES = {4, 2, 1};

    private DLedgerRun() {
    }

    public static void main(String[] args) {
        ModeRun.main(args, DLedgerRun::write, DLedgerRun::restart);
    }

    /** BROKER_CONF with dLegerPeers' port replaced by a free one, written beside the store. */
    static File confWithFreePort(File root, File conf) throws Exception {
        Properties p = new Properties();
        try (InputStream in = new FileInputStream(conf)) {
            p.load(in);
        }
        int port;
        try (ServerSocket s = new ServerSocket(0)) {
            port = s.getLocalPort();
        }
        p.setProperty("dLegerPeers", p.getProperty("dLegerPeers", "n0-127.0.0.1:0").replaceAll(":[0-9]+$", ":" + port));
        File out = new File(root.getParentFile(), root.getName() + ".dledger-run.conf");
        try (OutputStream o = new FileOutputStream(out)) {
            p.store(o, null);
        }
        return out;
    }

    static DLedgerServer server(DefaultMessageStore store) {
        return ((DLedgerCommitLog) store.getCommitLog()).getdLedgerServer();
    }

    static boolean waitLeader(DLedgerServer s) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 30_000L;
        while (!s.getMemberState().isLeader() && System.currentTimeMillis() < deadline) {
            Thread.sleep(5);
        }
        return s.getMemberState().isLeader();
    }

    static Map<String, Object> state(DefaultMessageStore store) {
        DLedgerServer srv = server(store);
        DLedgerMmapFileStore fs = (DLedgerMmapFileStore) srv.getdLedgerStore();
        MmapFileList data = fs.getDataFileList();
        MmapFileList index = fs.getIndexFileList();
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("role", String.valueOf(srv.getMemberState().getRole()));
        s.put("currTerm", srv.getMemberState().currTerm());
        s.put("ledgerBeginIndex", fs.getLedgerBeginIndex());
        s.put("ledgerEndIndex", fs.getLedgerEndIndex());
        s.put("ledgerEndTerm", fs.getLedgerEndTerm());
        s.put("committedIndex", fs.getCommittedIndex());
        s.put("committedPos", fs.getCommittedPos());
        s.put("dataFiles", data.getMappedFiles().size());
        s.put("dataWritePosition", data.getMaxWrotePosition());
        s.put("indexFiles", index.getMappedFiles().size());
        s.put("indexWritePosition", index.getMaxWrotePosition());
        s.put("minPhyOffset", store.getMinPhyOffset());
        s.put("maxPhyOffset", store.getMaxPhyOffset());
        return s;
    }

    /** Put i of a run planned by rnd (topic, queue, body, TAGS, KEYS, UNIQ_KEY): what the store answered. */
    static Map<String, Object> put(DefaultMessageStore store, Random rnd, int i) throws Exception {
        int t = rnd.nextInt(3);
        MessageExt m = Compat.newMessage();
        m.setTopic(TOPICS[t]);
        m.setQueueId(rnd.nextInt(QUEUES[t]));
        byte[] body = new byte[20 + rnd.nextInt(1480)];
        rnd.nextBytes(body);
        m.setBody(body);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TAGS, "T" + (i % 5));
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_KEYS, "K" + i + " G" + (i % 20));
        MessageClientIDSetter.setUniqID(m);
        Write.hosts(m);
        Compat.seal(m);
        PutMessageResult res = Compat.put(store, m);
        AppendMessageResult a = res.getAppendMessageResult();
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("i", i);
        r.put("topic", m.getTopic());
        r.put("queueId", m.getQueueId());
        r.put("status", String.valueOf(res.getPutMessageStatus()));
        if (res.isOk() && a != null) {
            r.put("phy", a.getWroteOffset());
            r.put("size", a.getWroteBytes());
            r.put("queueOffset", a.getLogicsOffset());
        }
        return r;
    }

    static void write(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        root.mkdirs();
        int puts = Integer.parseInt(args[3]);
        long seed = Long.parseLong(args[4]);
        String end = args[5];
        Stores s = new Stores(root, confWithFreePort(root, new File(args[2])));
        DefaultMessageStore store = s.store;
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + root);
        }
        store.start();
        Compat.afterStart(store);
        if (!waitLeader(server(store))) {
            throw new IllegalStateException("no LEADER after 30 s");
        }
        Random rnd = new Random(seed);
        List<Object> acked = new ArrayList<>();
        for (int i = 0; i < puts; i++) {
            acked.add(put(store, rnd, i));
        }
        // GroupX's offsets from a Random of their own: the puts and the halt's pause stay as before
        Write.commitOffsets(root, store, new Random(seed + 1), TOPICS, QUEUES, TOPICS.length);
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("written", acked);
        j.put("end", end);
        j.put("state", state(store));
        if ("shutdown".equals(end)) {
            store.shutdown();
            Json.emit(j);
            System.exit(0);
        }
        long pause = rnd.nextInt(301);
        j.put("pauseMs", pause);
        Thread.sleep(pause);
        Json.emit(j);
        Runtime.getRuntime().halt(0);    // kill -9: no shutdown hook, no checkpoint
    }

    static void restart(String[] args) throws Exception {
        List<Object> runs = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            runs.add(restartOne(new File(args[i]).getAbsoluteFile(), new File(args[1])));
        }
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("runs", runs);
        Json.emit(j);
        System.exit(0);
    }

    static Map<String, Object> restartOne(File root, File conf) throws Exception {
        Stores s = new Stores(root, confWithFreePort(root, conf));
        DefaultMessageStore store = s.store;
        File dl = new File(root, "dledger-" + s.config.getdLegerSelfId());
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("abortFile", new File(root, "abort").exists());
        j.put("checkpointBefore", props(new File(dl, "checkpoint")));
        boolean loaded = store.load();
        j.put("loadResult", loaded);
        if (!loaded) {
            return j;
        }
        j.put("afterLoad", state(store));
        store.start();
        Compat.afterStart(store);
        DLedgerServer srv = server(store);
        DLedgerMmapFileStore fs = (DLedgerMmapFileStore) srv.getdLedgerStore();
        long t0 = System.nanoTime();
        j.put("leader", waitLeader(srv));
        j.put("electionSeconds", (System.nanoTime() - t0) / 1e9);
        long deadline = System.currentTimeMillis() + 60_000L;
        boolean caughtUp = false;
        while (System.currentTimeMillis() < deadline) {
            if (fs.getLedgerEndIndex() == fs.getCommittedIndex() && store.dispatchBehindBytes() == 0) {
                caughtUp = true;
                break;
            }
            Thread.sleep(5);
        }
        j.put("committedAndDispatched", caughtUp);
        store.recoverTopicQueueTable();    // as DLedgerRoleChangeHandler does before changeToMaster
        j.put("afterCommit", state(store));
        j.put("recoveryPath", (Boolean) j.get("abortFile") ? "abnormal" : "normal");
        j.put("minPhyOffset", store.getMinPhyOffset());
        j.put("maxPhyOffset", store.getMaxPhyOffset());
        Map<String, Map<String, Object>> queues = Restart.queues(store, root, true);
        j.put("queues", queues);
        j.put("index", Restart.index(store, queues, 200, s.config.getMaxMsgsNumBatch()));
        j.put("consumerOffsets", Restart.consumerOffsets(store, root));
        long t1 = System.nanoTime();
        store.shutdown();
        j.put("shutdownSeconds", (System.nanoTime() - t1) / 1e9);
        j.put("checkpointAfter", props(new File(dl, "checkpoint")));
        j.put("currtermAfter", props(new File(dl, "currterm")));
        return j;
    }

    static Map<String, Object> props(File f) throws Exception {
        if (!f.isFile()) {
            return null;
        }
        Properties p = new Properties();
        p.load(new java.io.StringReader(new String(Files.readAllBytes(f.toPath()), StandardCharsets.UTF_8)));
        Map<String, Object> m = new TreeMap<>();
        for (String k : p.stringPropertyNames()) {
            m.put(k, p.getProperty(k));
        }
        return m;
    }
}
