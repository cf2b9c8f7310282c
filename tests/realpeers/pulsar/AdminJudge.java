// Apache Pulsar's own admin client (PulsarAdmin, pulsar-client-admin-original from Maven Central)
// as a judge of a broker's admin REST API: tests/pulsarwire/broker/test_admin_rest_real_pulsar.py
// runs it once, with `java -cp <the pulsar peer's jars> AdminJudge.java` and five arguments per
// broker (Apache Pulsar standalone's, then ours): ADMIN_URL TOPIC PARTITIONED_TOPIC LEDGER:ENTRY
// TAG, and compares what it prints for each: one "broker<TAB>step<TAB>result" line per call, in
// order. TOPIC holds messages written beforehand by the test; LEDGER:ENTRY is the id of its second
// message; PARTITIONED_TOPIC has 2 partitions and no subscription; TAG makes the names of the run's
// roles and tenant unique. A call that fails prints the admin client's exception class and its
// HTTP status.

import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;
import java.util.concurrent.Callable;
import org.apache.pulsar.client.admin.PulsarAdmin;
import org.apache.pulsar.client.admin.PulsarAdminException;
import org.apache.pulsar.client.api.Message;
import org.apache.pulsar.client.api.MessageId;
import org.apache.pulsar.client.impl.MessageIdImpl;
import org.apache.pulsar.common.policies.data.AuthAction;
import org.apache.pulsar.common.policies.data.PartitionedTopicInternalStats;
import org.apache.pulsar.common.policies.data.PartitionedTopicStats;
import org.apache.pulsar.common.policies.data.TenantInfo;

public class AdminJudge {
    static String broker = "";

    static void out(String step, Object result) {
        System.out.println(broker + "\t" + step + "\t" + result);
    }

    static void call(String step, Callable<Object> fn) {
        try {
            out(step, fn.call());
        } catch (PulsarAdminException e) {
            out(step, e.getClass().getSimpleName() + " " + e.getStatusCode());
        } catch (Exception e) {
            out(step, e.getClass().getSimpleName());
        }
    }

    static String describe(Message<byte[]> m) {
        return m.getMessageId() + " " + new String(m.getData()) + " " + new TreeMap<>(m.getProperties())
                + " key=" + m.getKey() + " publishTimeSet=" + (m.getPublishTime() > 0);
    }

    static List<String> describeAll(List<Message<byte[]>> messages) {
        List<String> out = new ArrayList<>();
        for (Message<byte[]> m : messages) {
            out.add(describe(m));
        }
        return out;
    }

    static Map<String, Set<String>> sorted(Map<String, Set<AuthAction>> permissions) {
        Map<String, Set<String>> out = new TreeMap<>();
        permissions.forEach((role, actions) -> {
            Set<String> names = new TreeSet<>();
            actions.forEach(a -> names.add(String.valueOf(a)));
            out.put(role, names);
        });
        return out;
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 5 <= args.length; i += 5) {
            broker = String.valueOf(i / 5);
            judge(args[i], args[i + 1], args[i + 2], args[i + 3].split(":"), args[i + 4]);
        }
    }

    static void judge(String url, String topic, String parted, String[] id, String tag) throws Exception {
        MessageId second = new MessageIdImpl(Long.parseLong(id[0]), Long.parseLong(id[1]), -1);
        try (PulsarAdmin admin = PulsarAdmin.builder().serviceHttpUrl(url).build()) {
            var topics = admin.topics();
            call("last message id", () -> topics.getLastMessageId(topic));
            call("create subscription", () -> {
                topics.createSubscription(topic, "judge", MessageId.earliest);
                return "ok";
            });
            call("peek 10", () -> describeAll(topics.peekMessages(topic, "judge", 10)));
            call("examine earliest 2", () -> describe(topics.examineMessage(topic, "earliest", 2)));
            call("examine latest 1", () -> describe(topics.examineMessage(topic, "latest", 1)));
            call("message by id", () -> describe(topics.getMessageById(topic, Long.parseLong(id[0]), Long.parseLong(id[1]))));
            call("reset to the second", () -> {
                topics.resetCursor(topic, "judge", second, false);
                return describeAll(topics.peekMessages(topic, "judge", 1));
            });
            call("reset after the second", () -> {
                topics.resetCursor(topic, "judge", second, true);
                return describeAll(topics.peekMessages(topic, "judge", 1));
            });
            call("reset by time", () -> {
                topics.resetCursor(topic, "judge", 0L);
                return describeAll(topics.peekMessages(topic, "judge", 1));
            });
            call("subscriptions", () -> new TreeSet<>(topics.getSubscriptions(topic)));
            call("stats", () -> {
                var stats = topics.getStats(topic);
                // (not msgBacklog: Pulsar counts entries there, a batch as one; our broker counts messages)
                return stats.getMsgInCounter() + " " + new TreeSet<>(stats.getSubscriptions().keySet());
            });
            call("internal stats", () -> {
                var stats = topics.getInternalStats(topic);
                return stats.numberOfEntries + " " + new TreeSet<>(stats.cursors.keySet());
            });
            call("unload", () -> {
                topics.unload(topic);
                return "ok";
            });
            call("missing topic", () -> topics.getLastMessageId(topic + "-missing"));
            call("partitioned: create subscription", () -> {
                topics.createSubscription(parted, "ps", MessageId.latest);
                return new TreeSet<>(topics.getSubscriptions(parted));
            });
            call("partitioned: stats", () -> {
                PartitionedTopicStats stats = topics.getPartitionedStats(parted, true);
                return stats.getMetadata().partitions + " " + new TreeSet<>(stats.getPartitions().keySet())
                        + " " + new TreeSet<>(stats.getSubscriptions().keySet());
            });
            call("partitioned: internal stats", () -> {
                PartitionedTopicInternalStats stats = topics.getPartitionedInternalStats(parted);
                return stats.metadata.partitions + " " + new TreeSet<>(stats.partitions.keySet());
            });
            call("partitioned: delete subscription", () -> {
                topics.deleteSubscription(parted, "ps");
                return new TreeSet<>(topics.getSubscriptions(parted));
            });
            call("partitioned: peek", () -> topics.peekMessages(parted, "ps", 1));
            var namespaces = admin.namespaces();
            String role = "judge-" + tag;
            call("grant on namespace", () -> {
                namespaces.grantPermissionOnNamespace("public/default", role, EnumSet.of(AuthAction.produce, AuthAction.consume));
                return sorted(namespaces.getPermissions("public/default")).get(role);
            });
            call("grant on topic", () -> {
                topics.grantPermission(topic, role + "-t", Set.of(AuthAction.produce));
                return sorted(topics.getPermissions(topic)).get(role + "-t");
            });
            call("revoke", () -> {
                namespaces.revokePermissionsOnNamespace("public/default", role);
                topics.revokePermissions(topic, role + "-t");
                return sorted(namespaces.getPermissions("public/default")).containsKey(role);
            });
            String tenant = "judge-" + tag;
            call("tenant and namespace", () -> {
                admin.tenants().createTenant(tenant, TenantInfo.builder().adminRoles(Set.of()).allowedClusters(Set.of("standalone")).build());
                namespaces.createNamespace(tenant + "/ns");
                return namespaces.getNamespaces(tenant);
            });
            call("delete a tenant with a namespace", () -> {
                admin.tenants().deleteTenant(tenant);
                return "deleted";
            });
            call("delete the namespace, then the tenant", () -> {
                namespaces.deleteNamespace(tenant + "/ns");
                admin.tenants().deleteTenant(tenant);
                return admin.tenants().getTenants().contains(tenant);
            });
        }
    }
}
