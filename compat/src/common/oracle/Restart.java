package oracle;

import java.io.File;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.UtilAll;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.GetMessageResult;
import org.apache.rocketmq.store.QueryMessageResult;

/**
 * A broker restart on a store, IN PLACE (the caller passes a copy):
 *
 *   oracle.Restart STORE_DIR BROKER_CONF [MAX_KEYS [full|summary]]
 *
 * The real DefaultMessageStore under the store's broker.conf: load(), start(), wait until the
 * reput has dispatched everything, then report on stdout (Json) what the broker ended with: the load
 * result or the exception, the recovery path, min/max phy offset, every consume queue's min/max and
 * each entry resolved to its message, queryMessage answers for up to MAX_KEYS (default 200) keys
 * of those messages (maxNum: the broker's maxMsgsNumBatch), and the consumer offsets the broker's ConsumerOffsetManager would load (the
 * same ConfigManager#load, with its .bak fallback) with the getMessage status of each; then a clean
 * shutdown(). What the restart changed on disk is for the caller to diff. summary: the queues'
 * ranges only (no entries, index answers or consumer offsets), for timing a restart on a big store.
 */
public final class Restart {
    static final long REPUT_TIMEOUT_MS = 300_000L;

    private Restart() {
    }

    public static void main(String[] args) {
        Json.claimStdout();
        try {
            restart(args);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);    // the store's threads would keep the JVM up
        }
    }

    static void restart(String[] args) throws Exception {
        File root = new File(args[0]).getAbsoluteFile();
        int maxKeys = args.length > 2 ? Integer.parseInt(args[2]) : 200;
        boolean full = args.length <= 3 || "full".equals(args[3]);
        Map<String, Object> j = new LinkedHashMap<>();
        boolean abort = new File(root, "abort").exists();
        j.put("abortFileExisted", abort);
        j.put("recoveryPath", abort ? "abnormal" : "normal");   // DefaultMessageStore#isTempFileExist
        long t0 = System.nanoTime();
        Stores s = new Stores(root, new File(args[1]));
        DefaultMessageStore store = s.store;
        boolean loaded = false;
        try {
            loaded = store.load();
        } catch (Throwable e) {
            j.put("loadException", String.valueOf(e));
        }
        j.put("loadResult", loaded);
        j.put("loadSeconds", (System.nanoTime() - t0) / 1e9);
        if (loaded) {
            long t1 = System.nanoTime();
            store.start();
            Compat.afterStart(store);
            long deadline = System.currentTimeMillis() + REPUT_TIMEOUT_MS;
            while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
                Thread.sleep(2);
            }
            j.put("reputDone", store.dispatchBehindBytes() <= 0);
            j.put("startReputSeconds", (System.nanoTime() - t1) / 1e9);
            j.put("minPhyOffset", store.getMinPhyOffset());
            j.put("maxPhyOffset", store.getMaxPhyOffset());
            Map<String, Map<String, Object>> queues = queues(store, root, full);
            j.put("queues", queues);
            if (full) {
                j.put("index", index(store, queues, maxKeys, s.config.getMaxMsgsNumBatch()));
                j.put("consumerOffsets", consumerOffsets(store, root));
            }
        }
        long t2 = System.nanoTime();
        store.shutdown();
        j.put("shutdownSeconds", (System.nanoTime() - t2) / 1e9);
        Json.emit(j);
        System.exit(0);
    }

    /** topic -> queueId -> {inTable, minOffset, maxOffset, entries}; the queues of the store's table and of consumequeue/. */
    static Map<String, Map<String, Object>> queues(DefaultMessageStore store, File root, boolean entries) {
        TreeMap<String, TreeSet<Integer>> all = new TreeMap<>();
        for (Map.Entry<String, ? extends Map<Integer, ?>> e : store.getConsumeQueueTable().entrySet()) {
            all.computeIfAbsent(e.getKey(), k -> new TreeSet<>()).addAll(e.getValue().keySet());
        }
        File[] topics = new File(root, "consumequeue").listFiles();
        for (File t : topics == null ? new File[0] : topics) {
            String[] ids = t.list();
            for (String q : ids == null ? new String[0] : ids) {
                try {
                    all.computeIfAbsent(t.getName(), k -> new TreeSet<>()).add(Integer.parseInt(q));
                } catch (NumberFormatException ignore) {
                    // not a queue directory
                }
            }
        }
        Map<String, Map<String, Object>> out = new TreeMap<>();
        for (Map.Entry<String, TreeSet<Integer>> e : all.entrySet()) {
            String topic = e.getKey();
            Map<String, Object> byId = new TreeMap<>();
            Map<Integer, ?> table = store.getConsumeQueueTable().get(topic);
            for (int qid : e.getValue()) {
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("inTable", table != null && table.containsKey(qid));
                if (!(Boolean) q.get("inTable")) {
                    byId.put(String.valueOf(qid), q);
                    continue;
                }
                long min;
                long max;
                try {
                    min = store.getMinOffsetInQueue(topic, qid);
                    max = store.getMaxOffsetInQueue(topic, qid);
                } catch (Exception ex) {    // 5.x declares ConsumeQueueException
                    q.put("offsetError", String.valueOf(ex));
                    byId.put(String.valueOf(qid), q);
                    continue;
                }
                q.put("minOffset", min);
                q.put("maxOffset", max);
                if (entries) {
                    List<Object> rows = new ArrayList<>();
                    for (long off = min; off < max; off++) {
                        rows.add(entry(store, topic, qid, off));
                    }
                    q.put("entries", rows);
                }
                byId.put(String.valueOf(qid), q);
            }
            out.put(topic, byId);
        }
        return out;
    }

    /** {q, phy, size, tags, msg}: msg is the message the unit resolves to (null: none; fillers have none). */
    static Map<String, Object> entry(DefaultMessageStore store, String topic, int qid, long off) {
        Map<String, Object> row = new LinkedHashMap<>();
        row.put("q", off);
        long[] u = Compat.unit(store, topic, qid, off);
        if (u == null) {
            row.put("missing", true);
            return row;
        }
        row.put("phy", u[0]);
        row.put("size", u[1]);
        row.put("tags", u[2]);
        MessageExt m = null;
        if (u[1] > 0 && u[1] < Integer.MAX_VALUE) {
            try {
                m = store.lookMessageByOffset(u[0], (int) u[1]);
            } catch (Throwable ex) {
                row.put("readError", String.valueOf(ex));
            }
        }
        if (m != null) {
            Map<String, Object> msg = new LinkedHashMap<>();
            msg.put("topic", m.getTopic());
            msg.put("queueId", m.getQueueId());
            msg.put("queueOffset", m.getQueueOffset());
            msg.put("phy", m.getCommitLogOffset());
            msg.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            msg.put("keys", m.getKeys());
            msg.put("multiDispatch", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_DISPATCH));
            msg.put("multiQueueOffset", m.getProperty(MessageConst.PROPERTY_INNER_MULTI_QUEUE_OFFSET));
            byte[] body = m.getBody();
            msg.put("bodyCrcOk", UtilAll.crc32(body == null ? new byte[0] : body) == m.getBodyCRC());
            row.put("msg", msg);
        }
        return row;
    }

    /** queryMessage for up to maxKeys (topic, key) pairs (KEYS and UNIQ_KEY) of the messages the queues resolve to. */
    @SuppressWarnings("unchecked")
    static List<Object> index(DefaultMessageStore store, Map<String, Map<String, Object>> queues, int maxKeys,
                              int maxNum) {
        TreeSet<String> wanted = new TreeSet<>();    // topic \u0001 key
        for (Map<String, Object> byId : queues.values()) {
            for (Object qo : byId.values()) {
                Object rows = ((Map<String, Object>) qo).get("entries");
                for (Object ro : rows == null ? Collections.emptyList() : (List<Object>) rows) {
                    Map<String, Object> msg = (Map<String, Object>) ((Map<String, Object>) ro).get("msg");
                    if (msg == null) {
                        continue;
                    }
                    String topic = (String) msg.get("topic");
                    String keys = (String) msg.get("keys");
                    if (keys != null) {
                        for (String k : keys.split(MessageConst.KEY_SEPARATOR)) {
                            if (!k.isEmpty()) {
                                wanted.add(topic + '\u0001' + k);
                            }
                        }
                    }
                    if (msg.get("uniqKey") != null) {
                        wanted.add(topic + '\u0001' + msg.get("uniqKey"));
                    }
                }
            }
        }
        List<String> keys = new ArrayList<>(wanted);
        List<Object> out = new ArrayList<>();
        int n = Math.min(maxKeys, keys.size());
        for (int i = 0; i < n; i++) {
            String tk = keys.get((int) ((long) i * keys.size() / n));
            String topic = tk.substring(0, tk.indexOf('\u0001'));
            String key = tk.substring(tk.indexOf('\u0001') + 1);
            List<Long> got = new ArrayList<>();
            QueryMessageResult r = store.queryMessage(topic, key, maxNum, 0, Long.MAX_VALUE);
            try {
                for (ByteBuffer bb : r.getMessageBufferList()) {
                    MessageExt m = MessageDecoder.decode(bb.duplicate(), false, false);
                    got.add(m == null ? -1L : m.getCommitLogOffset());
                }
            } finally {
                r.release();
            }
            Collections.sort(got);
            Map<String, Object> q = new LinkedHashMap<>();
            q.put("topic", topic);
            q.put("key", key);
            q.put("phyOffsets", got);
            out.add(q);
        }
        return out;
    }

    /** config/consumerOffset.json as the broker's ConsumerOffsetManager loads it, and what a pull at each offset gets. */
    static Map<String, Object> consumerOffsets(DefaultMessageStore store, File root) {
        Map<String, Object> out = new LinkedHashMap<>();
        ConsumerOffsets f = new ConsumerOffsets(new File(new File(root, "config"), "consumerOffset.json").getPath());
        out.put("loaded", f.load());
        List<Object> checks = new ArrayList<>();
        for (Map.Entry<String, ConcurrentMap<Integer, Long>> e : new TreeMap<>(f.table).entrySet()) {
            int at = e.getKey().indexOf('@');    // topic@group
            String topic = e.getKey().substring(0, at);
            String group = e.getKey().substring(at + 1);
            for (Map.Entry<Integer, Long> qe : new TreeMap<>(e.getValue()).entrySet()) {
                Map<String, Object> c = new LinkedHashMap<>();
                c.put("topic", topic);
                c.put("group", group);
                c.put("queueId", qe.getKey());
                c.put("committedOffset", qe.getValue());
                GetMessageResult r = store.getMessage(group, topic, qe.getKey(), qe.getValue(), 1, null);
                if (r != null) {
                    c.put("status", String.valueOf(r.getStatus()));
                    c.put("nextBeginOffset", r.getNextBeginOffset());
                    c.put("minOffset", r.getMinOffset());
                    c.put("maxOffset", r.getMaxOffset());
                    r.release();
                }
                checks.add(c);
            }
        }
        out.put("checks", checks);
        return out;
    }
}
