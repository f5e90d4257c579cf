// The real 5.x TimerMessageStore on a store directory: the project's oracle for the timer store (issue 32).
//
//   TimerOracle write   STORE CONF N_TIMER N_NORMAL SEED halt|shutdown
//   TimerOracle restart STORE CONF
//
// Prints one JSON object on stdout (the store's own log goes to stderr). Wired as BrokerController wires a
// master with timerWheelEnable=true: DefaultMessageStore, TimerCheckpoint(config/timercheck),
// TimerMetrics(config/timermetrics), TimerMessageStore, store.setTimerMessageStore; store.load() then
// timer.load() (TimerLog load + TimerMessageStore#recover); store.start(), timer.start().
//
// write: timer messages are rerouted the way the broker's put hook does it (HookUtils#transformTimerMessage:
//   TIMER_OUT_MS = TIMER_DELIVER_MS rounded down to timerPrecisionMs, one step less when exact; REAL_TOPIC,
//   REAL_QID; topic rmq_sys_wheel_timer queue 0), deliver times 120..600 s ahead so nothing is due while the
//   test looks; ordinary messages interleaved. At half of the messages, once the enqueue service caught up,
//   one pass of what TimerFlushService does (prepareTimerCheckPoint, timerlog flush, wheel flush, timercheck
//   flush): with a long timerFlushIntervalMs in CONF the files on disk then hold exactly that state, the
//   "stale timercheck" a kill -9 leaves. Waits until every timer message is in the timerlog, then
//   Runtime.halt (kill -9) or the broker's shutdown order.
// restart: load and recover; start with dequeue off (the enqueue service runs, nothing is delivered);
//   waits until the enqueue service caught up with rmq_sys_wheel_timer/0; prints the timer state after
//   recover and after the catch-up, every timerlog unit, and for every wheel slot the dequeue can still
//   reach (slot time >= currReadTimeMs) what TimerMessageStore#dequeue would hand on: the slot's chain from
//   lastPos through prevPos, each unit's message read like getMessageByCommitOffset (getData + decode).

import java.io.File;
import java.io.FileInputStream;
import java.io.InputStream;
import java.io.PrintStream;
import java.lang.reflect.Constructor;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.MixAll;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageClientIDSetter;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.MappedFileQueue;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.logfile.MappedFile;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import org.apache.rocketmq.store.timer.Slot;
import org.apache.rocketmq.store.timer.TimerCheckpoint;
import org.apache.rocketmq.store.timer.TimerLog;
import org.apache.rocketmq.store.timer.TimerMessageStore;
import org.apache.rocketmq.store.timer.TimerMetrics;
import org.apache.rocketmq.store.timer.TimerWheel;

public class TimerOracle {
    static DefaultMessageStore store;
    static TimerMessageStore timer;
    static TimerCheckpoint checkpoint;
    static MessageStoreConfig config;
    static PrintStream out;

    public static void main(String[] a) throws Exception {
        out = System.out;
        System.setOut(System.err);      // whatever the store prints stays off the JSON
        Map<String, Object> j = "write".equals(a[0]) ? write(a) : restart(a);
        out.println(json(j));
        out.flush();
        if ("halt".equals(j.get("end"))) Runtime.getRuntime().halt(0);
        System.exit(0);
    }

    static void wire(String storeDir, String conf) throws Exception {
        Properties props = new Properties();
        try (InputStream in = new FileInputStream(conf)) { props.load(in); }
        config = new MessageStoreConfig();
        BrokerConfig broker = new BrokerConfig();
        config.setHaListenPort(0);
        MixAll.properties2Object(props, broker);
        MixAll.properties2Object(props, config);
        config.setStorePathRootDir(storeDir);
        config.setStorePathCommitLog(storeDir + File.separator + "commitlog");
        BrokerStatsManager stats = new BrokerStatsManager(broker.getBrokerClusterName(), broker.isEnableDetailStat());
        store = null;
        for (Constructor<?> c : DefaultMessageStore.class.getConstructors()) {
            Class<?>[] p = c.getParameterTypes();
            if (p.length == 5 && p[0] == MessageStoreConfig.class && p[3] == BrokerConfig.class) {
                store = (DefaultMessageStore) c.newInstance(config, stats, null, broker, new ConcurrentHashMap<>());
            }
        }
        String cfg = storeDir + File.separator + "config" + File.separator;
        checkpoint = new TimerCheckpoint(cfg + "timercheck");
        timer = new TimerMessageStore(store, config, checkpoint, new TimerMetrics(cfg + "timermetrics"), null);
        store.setTimerMessageStore(timer);
    }

    static MessageExtBrokerInner message(String topic, int queueId, byte[] body, int i) {
        MessageExtBrokerInner m = new MessageExtBrokerInner();
        m.setTopic(topic);
        m.setQueueId(queueId);
        m.setBody(body);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TAGS, "T" + i % 3);
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_KEYS, "K" + i);
        MessageClientIDSetter.setUniqID(m);
        m.setTagsCode(MessageExtBrokerInner.tagsString2tagsCode("T" + i % 3));
        m.setBornTimestamp(System.currentTimeMillis());
        m.setBornHost(new java.net.InetSocketAddress("127.0.0.1", 40001));
        m.setStoreHost(new java.net.InetSocketAddress("127.0.0.1", 10911));
        return m;
    }

    /** the broker's put hook for a message with TIMER_DELIVER_MS (HookUtils#transformTimerMessage) */
    static long reroute(MessageExtBrokerInner m, long deliverMs) {
        int p = config.getTimerPrecisionMs();
        long outMs = deliverMs % p == 0 ? deliverMs - p : deliverMs / p * p;
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_DELIVER_MS, String.valueOf(deliverMs));
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_TIMER_OUT_MS, String.valueOf(outMs));
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, m.getTopic());
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(m.getQueueId()));
        m.setTopic(TimerMessageStore.TIMER_TOPIC);
        m.setQueueId(0);
        return outMs;
    }

    static void awaitEnqueued(long n) throws InterruptedException {
        long deadline = System.currentTimeMillis() + 30000;
        while (timer.getCommitQueueOffset() < n && System.currentTimeMillis() < deadline) Thread.sleep(5);
    }

    static Map<String, Object> write(String[] a) throws Exception {
        new File(a[1]).mkdirs();
        wire(new File(a[1]).getAbsolutePath(), a[2]);
        int nTimer = Integer.parseInt(a[3]), nNormal = Integer.parseInt(a[4]);
        Random rnd = new Random(Long.parseLong(a[5]));
        String end = a[6];
        if (!store.load() || !timer.load()) throw new IllegalStateException("load failed on a new store");
        store.start();
        timer.start();
        timer.syncLastReadTimeMs();
        timer.setShouldRunningDequeue(true);   // a master (BrokerController#changeSpecialServiceStatus)
        long t0 = System.currentTimeMillis();
        List<Object> written = new ArrayList<>();
        int timers = 0, normals = 0;
        Map<String, Object> j = new LinkedHashMap<>();
        for (int i = 0; i < nTimer + nNormal; i++) {
            boolean isTimer = normals >= nNormal || (timers < nTimer && rnd.nextInt(3) != 0);
            byte[] body = new byte[32 + rnd.nextInt(400)];
            rnd.nextBytes(body);
            Map<String, Object> w = new LinkedHashMap<>();
            MessageExtBrokerInner m;
            if (isTimer) {
                String topic = rnd.nextBoolean() ? "TimerA" : "TimerB";
                m = message(topic, rnd.nextInt(2), body, i);
                long deliverMs = t0 + 120_000L + rnd.nextInt(480_000);
                w.put("timer", true);
                w.put("realTopic", topic);
                w.put("realQueueId", m.getQueueId());
                w.put("deliverMs", deliverMs);
                w.put("timerOutMs", reroute(m, deliverMs));
                timers++;
            } else {
                m = message("Plain", rnd.nextInt(2), body, i);
                w.put("timer", false);
                normals++;
            }
            m.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
            PutMessageResult r = store.putMessage(m);
            w.put("status", String.valueOf(r.getPutMessageStatus()));
            w.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
            w.put("phy", r.getAppendMessageResult().getWroteOffset());
            w.put("size", r.getAppendMessageResult().getWroteBytes());
            w.put("queueOffset", r.getAppendMessageResult().getLogicsOffset());
            written.add(w);
            if (i == (nTimer + nNormal) / 2) {
                awaitEnqueued(timers);
                // one TimerFlushService pass, as its loop body does it
                timer.prepareTimerCheckPoint();
                timer.getTimerLog().getMappedFileQueue().flush(0);
                timer.getTimerWheel().flush();
                checkpoint.flush();
                j.put("flushedAtHalf", state());
            }
        }
        awaitEnqueued(nTimer);
        j.put("written", written);
        j.put("enqueuedAll", timer.getCommitQueueOffset() >= nTimer);
        j.put("end", end);
        j.put("beforeEnd", state());
        if ("shutdown".equals(end)) {
            timer.shutdown();
            store.shutdown();
        }
        return j;
    }

    static Map<String, Object> state() {
        Map<String, Object> s = new LinkedHashMap<>();
        s.put("currQueueOffset", timer.getQueueOffset());
        s.put("commitQueueOffset", timer.getCommitQueueOffset());
        s.put("currReadTimeMs", timer.getCurrReadTimeMs());
        MappedFileQueue q = timer.getTimerLog().getMappedFileQueue();
        s.put("timerLogMinOffset", q.getMinOffset());
        s.put("timerLogMaxOffset", q.getMaxOffset());
        s.put("timerLogFlushedWhere", q.getFlushedWhere());
        s.put("checkpoint", checkpointMap(checkpoint));
        ConsumeQueueInterface cq = store.getConsumeQueue(TimerMessageStore.TIMER_TOPIC, 0);
        s.put("timerQueueMin", cq == null ? 0 : cq.getMinOffsetInQueue());
        s.put("timerQueueMax", cq == null ? 0 : cq.getMaxOffsetInQueue());
        s.put("maxPhyOffset", store.getMaxPhyOffset());
        return s;
    }

    static Map<String, Object> checkpointMap(TimerCheckpoint c) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("lastReadTimeMs", c.getLastReadTimeMs());
        m.put("lastTimerLogFlushPos", c.getLastTimerLogFlushPos());
        m.put("lastTimerQueueOffset", c.getLastTimerQueueOffset());
        m.put("masterTimerQueueOffset", c.getMasterTimerQueueOffset());
        return m;
    }

    /** what getMessageByCommitOffset hands on for (offsetPy, sizePy); null when the dequeue misses it */
    static Map<String, Object> resolve(long offsetPy, int sizePy) {
        if (sizePy <= 0 || sizePy > config.getMaxMessageSize() + 100) return null;
        ByteBuffer bb = ByteBuffer.allocate(sizePy);
        if (!store.getData(offsetPy, sizePy, bb)) return null;
        bb.flip();
        MessageExt m;
        try { m = MessageDecoder.decode(bb, true, false, false); } catch (Throwable t) { return null; }
        if (m == null) return null;
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("topic", m.getTopic());
        r.put("queueOffset", m.getQueueOffset());
        r.put("uniqKey", m.getProperty(MessageConst.PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX));
        r.put("realTopic", m.getProperty(MessageConst.PROPERTY_REAL_TOPIC));
        r.put("timerOutMs", m.getProperty(MessageConst.PROPERTY_TIMER_OUT_MS));
        return r;
    }

    /** every timerlog unit up to the log's max offset, as the bytes stand */
    static List<Object> units() {
        List<Object> res = new ArrayList<>();
        MappedFileQueue q = timer.getTimerLog().getMappedFileQueue();
        long max = q.getMaxOffset();
        for (MappedFile f : q.getMappedFiles()) {
            ByteBuffer b = f.sliceByteBuffer();
            for (int p = 0; p + TimerLog.UNIT_SIZE <= f.getFileSize() && f.getFileFromOffset() + p < max; p += TimerLog.UNIT_SIZE) {
                if (b.getInt(p + 12) == TimerLog.BLANK_MAGIC_CODE) break;
                Map<String, Object> u = new LinkedHashMap<>();
                u.put("pos", f.getFileFromOffset() + p);
                u.put("size", b.getInt(p));
                u.put("prevPos", b.getLong(p + 4));
                u.put("magic", b.getInt(p + 12));
                u.put("delayedTimeMs", b.getLong(p + 16) + b.getInt(p + 24));
                u.put("offsetPy", b.getLong(p + 28));
                u.put("sizePy", b.getInt(p + 36));
                res.add(u);
            }
        }
        return res;
    }

    /** every slot the dequeue can still reach and what its chain hands on (TimerMessageStore#dequeue) */
    static List<Object> slots() {
        List<Object> res = new ArrayList<>();
        TimerWheel wheel = timer.getTimerWheel();
        int p = timer.getPrecisionMs();
        long readFrom = timer.getCurrReadTimeMs();
        MappedFileQueue q = timer.getTimerLog().getMappedFileQueue();
        for (int i = 0; i < wheel.slotsTotal * 2; i++) {
            Slot raw = wheel.getRawSlot((long) i * p);
            if (raw.timeMs < readFrom || wheel.getSlotIndex(raw.timeMs) != i) continue;
            Slot s = wheel.getSlot(raw.timeMs);
            if (s.timeMs == -1) continue;
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("timeMs", s.timeMs);
            m.put("firstPos", s.firstPos);
            m.put("lastPos", s.lastPos);
            m.put("num", s.num);
            List<Object> chain = new ArrayList<>();
            long cur = s.lastPos;
            while (cur != -1 && chain.size() < 1_000_000) {
                MappedFile f = q.findMappedFileByOffset(cur);
                if (f == null) break;     // dequeue: getWholeBuffer null, the rest of the chain is not read
                ByteBuffer b = f.sliceByteBuffer();
                int rel = (int) (cur % f.getFileSize());
                Map<String, Object> u = new LinkedHashMap<>();
                u.put("pos", cur);
                u.put("magic", b.getInt(rel + 12));
                u.put("delayedTimeMs", b.getLong(rel + 16) + b.getInt(rel + 24));
                long offsetPy = b.getLong(rel + 28);
                int sizePy = b.getInt(rel + 36);
                u.put("offsetPy", offsetPy);
                u.put("sizePy", sizePy);
                u.put("msg", resolve(offsetPy, sizePy));
                chain.add(u);
                cur = b.getLong(rel + 4);
            }
            m.put("chain", chain);
            res.add(m);
        }
        return res;
    }

    static Map<String, Object> restart(String[] a) throws Exception {
        String dir = new File(a[1]).getAbsolutePath();
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("abortFileExisted", new File(dir, "abort").exists());
        wire(dir, a[2]);
        j.put("timercheckOnDisk", checkpointMap(checkpoint));
        boolean loaded = false, timerLoaded = false;
        try { loaded = store.load(); } catch (Throwable e) { j.put("loadException", String.valueOf(e)); }
        j.put("loadResult", loaded);
        if (loaded) {
            try { timerLoaded = timer.load(); } catch (Throwable e) { j.put("timerLoadException", String.valueOf(e)); }
        }
        j.put("timerLoadResult", timerLoaded);
        if (!loaded || !timerLoaded) return j;
        j.put("afterRecover", state());
        j.put("unitsAfterRecover", units().size());
        store.start();
        long deadline = System.currentTimeMillis() + 60000;
        while (store.dispatchBehindBytes() > 0 && System.currentTimeMillis() < deadline) Thread.sleep(5);
        timer.start(false);     // enqueue only: nothing is delivered while we look
        ConsumeQueueInterface cq = store.getConsumeQueue(TimerMessageStore.TIMER_TOPIC, 0);
        long cqMax = cq == null ? 0 : cq.getMaxOffsetInQueue();
        deadline = System.currentTimeMillis() + 30000;
        while ((timer.getQueueOffset() < cqMax || timer.getCommitQueueOffset() < cqMax)
            && System.currentTimeMillis() < deadline) Thread.sleep(5);
        Thread.sleep(300);
        j.put("afterEnqueue", state());
        j.put("units", units());
        j.put("slots", slots());
        timer.shutdown();
        store.shutdown();
        j.put("timercheckAfterShutdown", checkpointMap(new TimerCheckpoint(dir + "/config/timercheck")));
        return j;
    }

    // -- JSON ------------------------------------------------------------------------------------------------
    static String json(Object o) {
        StringBuilder sb = new StringBuilder();
        json(o, sb);
        return sb.toString();
    }

    @SuppressWarnings("unchecked")
    static void json(Object o, StringBuilder sb) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof Map) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<String, Object> e : ((Map<String, Object>) o).entrySet()) {
                if (!first) sb.append(',');
                first = false;
                json(e.getKey(), sb);
                sb.append(':');
                json(e.getValue(), sb);
            }
            sb.append('}');
        } else if (o instanceof List) {
            sb.append('[');
            boolean first = true;
            for (Object e : (List<Object>) o) {
                if (!first) sb.append(',');
                first = false;
                json(e, sb);
            }
            sb.append(']');
        } else if (o instanceof Number || o instanceof Boolean) {
            sb.append(o);
        } else {
            sb.append('"');
            for (char c : o.toString().toCharArray()) {
                if (c == '"' || c == '\\') sb.append('\\').append(c);
                else if (c < 0x20) sb.append(String.format("\\u%04x", (int) c));
                else sb.append(c);
            }
            sb.append('"');
        }
    }
}
