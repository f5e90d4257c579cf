package oracle;

import java.io.File;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;

import org.apache.rocketmq.remoting.protocol.EpochEntry;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.autoswitch.AutoSwitchHAService;

/**
 * A store in controller mode (broker.conf enableControllerMode=true), 5.x:
 *
 *   oracle.ControllerRun write   STORE_DIR BROKER_CONF N1 N2 SEED
 *   oracle.ControllerRun restart STORE_DIR BROKER_CONF
 *
 * write: load(), start() (the store's AutoSwitchHAService reads the epoch file), then as the
 *   broker's ReplicasManager does on an election, AutoSwitchHAService#changeToMaster(1): epoch 1
 *   from phy 0, the confirm offset set to the commitlog's end; N1 puts (ModeStores#put);
 *   once dispatched a second election, changeToMaster(2) (epoch 2 from the end, confirm there) and
 *   the periodic checkpoint flush (FlushConsumeQueueService writes it every
 *   flushConsumeQueueThoroughInterval); N2 more puts, acked by a lone master, which leave the
 *   confirm offset where the election put it; then Runtime.halt as a kill -9.
 * restart: as BrokerController#recoverAndInitService loads a controller-mode store: fenced
 *   (ReplicasManager#setFenced(true) before load()), then load(), start(), the reput waited for;
 *   reports the confirm offset, min/max phy offset, the queue offset table
 *   (recoverTopicQueueTable, compensateForHA) and every queue (ModeStores#queues), then a clean
 *   shutdown().
 * Prints one Json document.
 */
public final class ControllerRun {
    private ControllerRun() {
    }

    public static void main(String[] args) {
        ModeRun.main(args, ControllerRun::write, ControllerRun::restart);
    }

    static List<Object> epochs(AutoSwitchHAService ha) {
        List<Object> out = new ArrayList<>();
        for (EpochEntry e : ha.getEpochEntries()) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("epoch", e.getEpoch());
            m.put("startOffset", e.getStartOffset());
            out.add(m);
        }
        return out;
    }

    static void write(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        int n1 = Integer.parseInt(args[3]);
        int n2 = Integer.parseInt(args[4]);
        Random rnd = new Random(Long.parseLong(args[5]));
        Stores s = new Stores(root, new File(args[2]));
        DefaultMessageStore store = s.store;
        if (!s.brokerConfig.isEnableControllerMode()) {
            throw new IllegalStateException("broker.conf must set enableControllerMode=true");
        }
        if (!store.load()) {
            throw new IllegalStateException("load() failed on " + root);
        }
        store.start();
        AutoSwitchHAService ha = (AutoSwitchHAService) store.getHaService();
        if (!ha.changeToMaster(1)) {
            throw new IllegalStateException("changeToMaster(1) failed");
        }
        List<Object> acked = new ArrayList<>(ModeStores.put(store, rnd, 0, n1));
        ModeStores.waitDispatched(store);
        if (!ha.changeToMaster(2)) {
            throw new IllegalStateException("changeToMaster(2) failed");
        }
        long confirm = store.getCommitLog().getConfirmOffsetDirectly();
        store.getStoreCheckpoint().flush();
        acked.addAll(ModeStores.put(store, rnd, n1, n2));
        ModeStores.waitDispatched(store);
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("written", acked);
        j.put("confirmOffsetAtSecondElection", confirm);
        j.put("epochs", epochs(ha));
        j.put("maxPhyOffset", store.getMaxPhyOffset());
        Json.emit(j);
        Runtime.getRuntime().halt(0);    // kill -9: the abort file stays
    }

    static void restart(String[] args) throws Exception {
        File root = new File(args[1]).getAbsoluteFile();
        Map<String, Object> j = new LinkedHashMap<>();
        j.put("recoveryPath", new File(root, "abort").exists() ? "abnormal" : "normal");
        Stores s = new Stores(root, new File(args[2]));
        DefaultMessageStore store = s.store;
        store.getRunningFlags().makeFenced(true);
        boolean loaded = store.load();
        j.put("loadResult", loaded);
        if (loaded) {
            j.put("confirmOffsetAfterRecovery", store.getCommitLog().getConfirmOffset());
            store.start();
            ModeStores.waitDispatched(store);
            j.put("confirmOffset", store.getCommitLog().getConfirmOffset());
            j.put("checkpointConfirmOffset", store.getStoreCheckpoint().getConfirmPhyOffset());
            j.put("minPhyOffset", store.getMinPhyOffset());
            j.put("maxPhyOffset", store.getMaxPhyOffset());
            j.put("topicQueueTable", ModeStores.topicQueueTable(store));
            j.put("epochs", epochs((AutoSwitchHAService) store.getHaService()));
            j.put("queues", ModeStores.queues(store));
        }
        store.shutdown();
        Json.emit(j);
        System.exit(0);
    }
}
