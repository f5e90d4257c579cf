package oracle;

import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentMap;

import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.AppendMessageResult;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;

/**
 * What the store-mode drivers (ControllerRun, DoubleWriteRun) share, on the 5.x
 * API of every supported 5.x release (what differs between them is reached by reflection):
 * seeded puts, the dispatch waited for, every queue the broker serves, its queue offset table.
 */
final class ModeStores {
    static final String[] TOPICS = {"TopicA", "TopicB", "TopicBig"};
    static final int[] QUEUES = {4, 2, 1};

    private ModeStores() {
    }

    /** N puts planned by rnd (TopicBig's 3-9 KB bodies roll the 64 KiB files); the acked ones. */
    static List<Object> put(DefaultMessageStore store, Random rnd, int from, int n) {
        List<Object> acked = new ArrayList<>();
        for (int i = from; i < from + n; i++) {
            int t = rnd.nextInt(TOPICS.length);
            MessageExtBrokerInner m = new MessageExtBrokerInner();
            m.setTopic(TOPICS[t]);
            m.setQueueId(rnd.nextInt(QUEUES[t]));
            byte[] body = new byte[t == 2 ? 3000 + rnd.nextInt(6000) : 20 + rnd.nextInt(1480)];
            rnd.nextBytes(body);
            m.setBody(body);
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_TAGS, "T" + (i % 5));
            MessageAccessor.putProperty(m, MessageConst.PROPERTY_KEYS, "K" + i);
            MessageClientIDSetter.setUniqID(m);
            m.setBornTimestamp(System.currentTimeMillis());
            m.setBornHost(new InetSocketAddress("127.0.0.1", 40001));
            m.setStoreHost(new InetSocketAddress("127.0.0.1", 10911));
            m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode(m.getTags()));
            m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
            PutMessageResult res = store.putMessage(m);
            AppendMessageResult a = res.getAppendMessageResult();
            if (res.isOk() && a != null) {
                Map<String, Object> r = new LinkedHashMap<>();
                r.put("i", i);
                r.put("topic", m.getTopic());
                r.put("queueId", m.getQueueId());
                r.put("phy", a.getWroteOffset());
                r.put("size", a.getWroteBytes());
                r.put("queueOffset", a.getLogicsOffset());
                acked.add(r);
            }
        }
        return acked;
    }

    static void waitDispatched(DefaultMessageStore store) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 300_000L;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) {
            Thread.sleep(2);
        }
    }

    /** topic -> queueId -> {minOffset, maxOffset, entries: [{q, phy, size, tags}]}. */
    /** A write's end: the acked puts and the max phy offset printed, then a clean shutdown()
     * ({@code how} "shutdown") or Runtime.halt as a kill -9 (the abort file stays). */
    static void endWrite(DefaultMessageStore store, List<Object> acked, String how) {
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("written", acked);
        j.put("maxPhyOffset", store.getMaxPhyOffset());
        if ("shutdown".equals(how)) {
            store.shutdown();
            Json.emit(j);
            System.exit(0);
        }
        Json.emit(j);
        Runtime.getRuntime().halt(0);
    }

    /** How a driver lists the queues a restarted store serves. */
    interface Served {
        Map<String, Map<String, Object>> queues(DefaultMessageStore store) throws Exception;
    }

    /** A restart: load(), start(), the reput waited for; into {@code j} the load result, min/max
     * phy offset and the served queues; shutdown(), then {@code j} printed. */
    static void restarted(DefaultMessageStore store, Map<String, Object> j, Served served) throws Exception {
        boolean loaded = store.load();
        j.put("loadResult", loaded);
        if (loaded) {
            store.start();
            waitDispatched(store);
            j.put("minPhyOffset", store.getMinPhyOffset());
            j.put("maxPhyOffset", store.getMaxPhyOffset());
            j.put("queues", served.queues(store));
        }
        store.shutdown();
        Json.emit(j);
        System.exit(0);
    }

    /** A queue's units from min to max as the broker reads them (ConsumeQueueInterface#get). */
    static List<Object> entries(ConsumeQueueInterface cq, long min, long max) {
        List<Object> entries = new ArrayList<>();
        for (long off = min; off < max; off++) {
            CqUnit u = cq.get(off);
            Map<String, Object> e = new LinkedHashMap<>();
            e.put("q", off);
            e.put("phy", u == null ? null : u.getPos());
            e.put("size", u == null ? null : u.getSize());
            e.put("tags", u == null ? null : u.getTagsCode());
            entries.add(e);
        }
        return entries;
    }

    static Map<String, Map<String, Object>> queues(DefaultMessageStore store) throws Exception {
        Map<String, Map<String, Object>> out = new TreeMap<>();
        for (Map.Entry<String, ConcurrentMap<Integer, ConsumeQueueInterface>> t : store.getConsumeQueueTable().entrySet()) {
            Map<String, Object> byId = new TreeMap<>();
            for (Integer qid : t.getValue().keySet()) {
                long min = store.getMinOffsetInQueue(t.getKey(), qid);
                long max = store.getMaxOffsetInQueue(t.getKey(), qid);
                ConsumeQueueInterface cq = store.getConsumeQueue(t.getKey(), qid);
                List<Object> entries = entries(cq, min, max);
                Map<String, Object> q = new LinkedHashMap<>();
                q.put("minOffset", min);
                q.put("maxOffset", max);
                q.put("entries", entries);
                byId.put(String.valueOf(qid), q);
            }
            out.put(t.getKey(), byId);
        }
        return out;
    }

    /** The queue offset table (topic-queueId -> next queue offset), null where the release hides it. */
    static Map<String, Object> topicQueueTable(DefaultMessageStore store) {
        Object queueStore = store.getQueueStore();
        try {
            Method m = queueStore.getClass().getMethod("getTopicQueueTable");
            return new TreeMap<>((Map<String, Object>) m.invoke(queueStore));
        } catch (ReflectiveOperationException e) {
            for (Class<?> c = queueStore.getClass(); c != null; c = c.getSuperclass()) {
                try {
                    Field f = c.getDeclaredField("queueOffsetOperator");
                    f.setAccessible(true);
                    Object op = f.get(queueStore);
                    return new TreeMap<>((Map<String, Object>) op.getClass().getMethod("getTopicQueueTable").invoke(op));
                } catch (ReflectiveOperationException ignored) {
                    // not this class
                }
            }
            return null;
        }
    }
}
