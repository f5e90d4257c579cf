package oracle;

import java.io.File;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBatch;
import org.apache.rocketmq.common.sysflag.MessageSysFlag;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;

/**
 * Writes a store through the real put path (DefaultMessageStore#putMessage / #putMessages):
 *
 *   oracle.Write STORE_DIR BROKER_CONF PUTS SEED END
 *
 * PUTS puts planned by java.util.Random(SEED): TopicA (4 queues), TopicB (2), %RETRY%GroupX (1),
 * TopicBig (1, 3-9 KB bodies so files roll), KEYS and TAGS on most messages, a UNIQ_KEY on all;
 * among them delayed (level 10-18, never due during a test), transactional (PREPARED, COMMIT,
 * ROLLBACK), LMQ multi-dispatch (INNER_MULTI_DISPATCH to %LMQ%L0/%LMQ%L1; needs enableLmq and
 * enableMultiDispatch) and batch (putMessages, 2-4 messages) puts. END says how the broker stops:
 *   shutdown   after PUTS puts, a clean shutdown();
 *   halt       after PUTS puts, Runtime.halt as a kill -9 (the abort file stays, the checkpoint is
 *              whatever the flush services last wrote);
 *   boundary   as halt, at the first put after PUTS that starts a new commitlog file;
 *   inflight   the puts run on their own thread and the process halts once PUTS are acked,
 *              while the next put is under way.
 * GroupX's committed offsets are persisted to config/consumerOffset.json (commitOffsets). Then,
 * except inflight, it waits a seeded 0-300 ms (the flush and reput threads lag by a random amount).
 * Prints (Json) every acknowledged put (and, apart, the puts the store refused): kind, topic, queueId, phy, size, queueOffset (batch: one
 * row per put), UNIQ_KEYs and KEYS, plus the commitlog's max and flushed offsets at the end.
 */
public final class Write {
    static final String[] TOPICS = {"TopicA", "TopicB", "%RETRY%GroupX", "TopicBig"};
    static final int[] QUEUES = {4, 2, 1, 1};

    private Write() {
    }

    public static void main(String[] args) {
        Json.claimStdout();
        try {
            write(args);
        } catch (Throwable e) {
            e.printStackTrace();
            Runtime.getRuntime().halt(1);
        }
    }

    static void write(String[] args) throws Exception {
        File root = new File(args[0]).getAbsoluteFile();
        int puts = Integer.parseInt(args[2]);
        long seed = Long.parseLong(args[3]);
        String end = args[4];
        Stores s = new Stores(root, new File(args[1]));
        DefaultMessageStore store = s.store;
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + root);
        }
        store.start();
        Compat.afterStart(store);
        Random rnd = new Random(seed);
        List<Object> acked = Collections.synchronizedList(new ArrayList<>());
        List<Object> refused = Collections.synchronizedList(new ArrayList<>());
        int fileSize = s.config.getMappedFileSizeCommitLog();
        if ("inflight".equals(end)) {
            Thread writer = new Thread(() -> {
                for (int i = 0; ; i++) {
                    put(store, rnd, i, acked, refused);
                }
            }, "oracle-writer");
            writer.setDaemon(true);
            writer.start();
            while (acked.size() < puts) {
                Thread.sleep(0, 200_000);
            }
        } else {
            for (int i = 0; i < puts || "boundary".equals(end); i++) {
                Map<String, Object> r = put(store, rnd, i, acked, refused);
                if (i >= puts && r != null && r.get("phy") != null && (Long) r.get("phy") % fileSize == 0) {
                    break;
                }
            }
        }
        commitOffsets(root, store, rnd, TOPICS, QUEUES, 3);
        long pause = "inflight".equals(end) ? 0 : rnd.nextInt(301);
        Thread.sleep(pause);
        Map<String, Object> j = new LinkedHashMap<>();
        synchronized (acked) {
            j.put("written", new ArrayList<>(acked));
        }
        j.put("refused", refused);
        j.put("end", end);
        j.put("seed", seed);
        j.put("maxPhyOffset", store.getMaxPhyOffset());
        j.put("flushedWhere", s.flushedWhere());
        j.put("pauseMs", pause);
        if ("shutdown".equals(end)) {
            store.shutdown();
            Json.emit(j);
            System.exit(0);
        }
        Json.emit(j);
        Runtime.getRuntime().halt(0);    // kill -9: no shutdown hook, no flush
    }

    /** One put of the plan (a single message or a batch); the acked result is appended to acked. */
    static Map<String, Object> put(DefaultMessageStore store, Random rnd, int i, List<Object> acked,
                                   List<Object> refused) {
        int t = rnd.nextInt(10) < 6 ? rnd.nextInt(2) : 2 + rnd.nextInt(2);
        int q = rnd.nextInt(QUEUES[t]);
        int kind = rnd.nextInt(100);
        if (kind < 22 && (kind < 6 ? t != 1 : kind < 10 || kind >= 16) && t != (kind < 6 ? 1 : 0)) {
            t = kind < 6 ? 1 : 0;    // batches go to TopicB, delayed and LMQ messages to TopicA
            q = rnd.nextInt(QUEUES[t]);
        }
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("i", i);
        PutMessageResult res;
        if (kind < 6) {
            int n = 2 + rnd.nextInt(3);
            List<Message> msgs = new ArrayList<>();
            List<String> uniq = new ArrayList<>();
            for (int k = 0; k < n; k++) {
                Message m = new Message(TOPICS[t], body(rnd, t));
                m.setKeys("K" + i + "_" + k);
                m.setTags("T" + (i % 5));
                MessageClientIDSetter.setUniqID(m);
                uniq.add(MessageClientIDSetter.getUniqID(m));
                msgs.add(m);
            }
            MessageExtBatch b = new MessageExtBatch();
            b.setTopic(TOPICS[t]);
            b.setQueueId(q);
            b.setBody(MessageDecoder.encodeMessages(msgs));
            hosts(b);
            r.put("kind", "batch");
            r.put("uniqKeys", uniq);
            res = store.putMessages(b);
        } else {
            MessageExt m = Compat.newMessage();
            m.setTopic(TOPICS[t]);
            m.setQueueId(q);
            m.setBody(body(rnd, t));
            String kindName = "normal";
            if (rnd.nextInt(6) != 0) {
                MessageAccessor.putProperty(m, MessageConst.PROPERTY_TAGS, "T" + (i % 5));
            }
            if (rnd.nextInt(8) != 0) {
                MessageAccessor.putProperty(m, MessageConst.PROPERTY_KEYS, "K" + i + (i % 3 == 0 ? " G" + (i % 20) : ""));
            }
            if (t == 2) {
                MessageAccessor.putProperty(m, MessageConst.PROPERTY_RETRY_TOPIC, "TopicA");
                m.setReconsumeTimes(1 + rnd.nextInt(3));
            }
            MessageClientIDSetter.setUniqID(m);
            hosts(m);
            if (kind < 10) {
                kindName = "delay";
                Compat.delay(store, m, 10 + rnd.nextInt(9));
            } else if (kind < 16) {
                int[] tran = {MessageSysFlag.TRANSACTION_PREPARED_TYPE, MessageSysFlag.TRANSACTION_COMMIT_TYPE,
                    MessageSysFlag.TRANSACTION_ROLLBACK_TYPE};
                int tt = tran[rnd.nextInt(3)];
                m.setSysFlag(tt);
                kindName = tt == MessageSysFlag.TRANSACTION_PREPARED_TYPE ? "prepared"
                    : tt == MessageSysFlag.TRANSACTION_COMMIT_TYPE ? "commit" : "rollback";
            } else if (kind < 22) {
                kindName = "lmq";
                MessageAccessor.putProperty(m, MessageConst.PROPERTY_INNER_MULTI_DISPATCH,
                    rnd.nextBoolean() ? "%LMQ%L0,%LMQ%L1" : "%LMQ%L1");
            }
            Compat.seal(m);
            r.put("kind", kindName);
            r.put("uniqKeys", Collections.singletonList(MessageClientIDSetter.getUniqID(m)));
            r.put("keys", m.getKeys());
            res = Compat.put(store, m);
            t = -1;
            r.put("topic", m.getTopic());
            r.put("queueId", m.getQueueId());
        }
        if (t >= 0) {
            r.put("topic", TOPICS[t]);
            r.put("queueId", q);
        }
        r.put("status", String.valueOf(res.getPutMessageStatus()));
        AppendMessageResult a = res.getAppendMessageResult();
        if (!res.isOk() || a == null) {
            refused.add(r);
            return null;
        }
        r.put("phy", a.getWroteOffset());
        r.put("size", a.getWroteBytes());
        r.put("queueOffset", a.getLogicsOffset());
        r.put("msgNum", a.getMsgNum());
        acked.add(r);
        return r;
    }

    /**
     * A consumer group's committed offsets, persisted as the broker's ConsumerOffsetManager does:
     * GroupX on every queue of the first n topics (here TopicA, TopicB and %RETRY%GroupX), at a
     * seeded offset from 0 to 3 past the queue's end (a consumer ahead of what a crash keeps).
     */
    static void commitOffsets(File root, DefaultMessageStore store, Random rnd, String[] topics, int[] queues,
                              int n) throws Exception {
        ConsumerOffsets offsets = new ConsumerOffsets(new File(new File(root, "config"), "consumerOffset.json").getPath());
        for (int t = 0; t < n; t++) {
            ConcurrentMap<Integer, Long> byQueue = new ConcurrentHashMap<>();
            for (int q = 0; q < queues[t]; q++) {
                long max;
                try {
                    max = store.getMaxOffsetInQueue(topics[t], q);
                } catch (Exception e) {    // 5.x declares ConsumeQueueException
                    throw new IllegalStateException(e);
                }
                byQueue.put(q, (long) rnd.nextInt((int) max + 4));
            }
            offsets.table.put(topics[t] + "@GroupX", byQueue);
        }
        offsets.persist();
    }

    static byte[] body(Random rnd, int topic) {
        byte[] b = new byte[topic == 3 ? 3000 + rnd.nextInt(6000) : 20 + rnd.nextInt(1480)];
        rnd.nextBytes(b);
        return b;
    }

    static void hosts(MessageExt m) {
        m.setBornTimestamp(System.currentTimeMillis());
        m.setBornHost(new InetSocketAddress("127.0.0.1", 40001));
        m.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
    }
}
