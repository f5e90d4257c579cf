package oracle;

import org.apache.rocketmq.common.BrokerConfig;
import org.apache.rocketmq.common.message.MessageAccessor;
import org.apache.rocketmq.common.message.MessageConst;
import org.apache.rocketmq.common.message.MessageDecoder;
import org.apache.rocketmq.common.message.MessageExt;
import org.apache.rocketmq.common.message.MessageExtBrokerInner;
import org.apache.rocketmq.common.topic.TopicValidator;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.PutMessageResult;
import org.apache.rocketmq.store.config.MessageStoreConfig;
import org.apache.rocketmq.store.queue.ConsumeQueueInterface;
import org.apache.rocketmq.store.queue.CqUnit;
import org.apache.rocketmq.store.stats.BrokerStatsManager;
import java.util.concurrent.ConcurrentHashMap;

/** What differs between the 4.x and 5.x store APIs: the 5.x side. */
final class Compat {
    private Compat() {
    }

    static DefaultMessageStore newStore(MessageStoreConfig msc, BrokerStatsManager stats, BrokerConfig bc)
        throws Exception {
        return new DefaultMessageStore(msc, stats, null, bc, new ConcurrentHashMap<>());
    }

    /** 5.x's schedule service belongs to the broker, not the store: nothing to stop. */
    static void afterStart(DefaultMessageStore store) {
    }

    static MessageExt newMessage() {
        return new MessageExtBrokerInner();
    }

    /** The fields the broker's SendMessageProcessor fills in from the properties. */
    static void seal(MessageExt m) {
        MessageExtBrokerInner inner = (MessageExtBrokerInner) m;
        String tags = m.getProperty(MessageConst.PROPERTY_TAGS);
        inner.setTagsCode(tags == null ? 0 : MessageExtBrokerInner.tagsString2tagsCode(tags));
        inner.setPropertiesString(MessageDecoder.messageProperties2String(m.getProperties()));
    }

    static PutMessageResult put(DefaultMessageStore store, MessageExt m) {
        return store.putMessage((MessageExtBrokerInner) m);
    }

    /**
     * A delay level: in 5.x the broker's put hook (HookUtils#transformDelayLevelMessage) moves the
     * message to SCHEDULE_TOPIC_XXXX before the store sees it; done here the same way.
     */
    static void delay(DefaultMessageStore store, MessageExt m, int level) {
        level = Math.min(level, store.getMaxDelayLevel());
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_DELAY_TIME_LEVEL, String.valueOf(level));
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_TOPIC, m.getTopic());
        MessageAccessor.putProperty(m, MessageConst.PROPERTY_REAL_QUEUE_ID, String.valueOf(m.getQueueId()));
        m.setTopic(TopicValidator.RMQ_SYS_SCHEDULE_TOPIC);
        m.setQueueId(level - 1);
    }

    /** The consume queue unit at offset: {phy, size, tagsCode}, null when there is none. */
    static long[] unit(DefaultMessageStore store, String topic, int queueId, long offset) {
        ConsumeQueueInterface cq = store.getConsumeQueue(topic, queueId);
        CqUnit u = cq == null ? null : cq.get(offset);
        return u == null ? null : new long[] {u.getPos(), u.getSize(), u.getTagsCode()};
    }
}
