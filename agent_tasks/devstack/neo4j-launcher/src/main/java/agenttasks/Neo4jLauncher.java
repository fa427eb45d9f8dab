package agenttasks;

import java.io.IOException;
import java.io.PrintStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.neo4j.configuration.GraphDatabaseSettings;
import org.neo4j.configuration.connectors.BoltConnector;
import org.neo4j.configuration.connectors.BoltConnectorInternalSettings;
import org.neo4j.configuration.connectors.HttpConnector;
import org.neo4j.configuration.connectors.HttpsConnector;
import org.neo4j.configuration.helpers.SocketAddress;
import org.neo4j.dbms.api.DatabaseManagementService;
import org.neo4j.dbms.api.DatabaseManagementServiceBuilder;
import org.neo4j.graphdb.GraphDatabaseService;
import org.neo4j.io.ByteUnit;

/**
 * Runs a real Neo4j Community DBMS (the embedded {@code DatabaseManagementService} with its Bolt
 * server) for the local dev stack.
 *
 * <p>Arguments:
 *
 * <pre>
 *   --home DIR             Neo4j home: data/ (stores, transaction logs) and logs/ (debug.log) go here
 *   --bolt-port N          Bolt port (required)
 *   --password-file FILE   file holding the password of the user "neo4j" (required; trailing
 *                          whitespace is ignored)
 *   --bolt-host HOST       address Bolt listens on (default 127.0.0.1)
 *   --pagecache SIZE       page cache size, e.g. 256m or 1g (default 256m)
 * </pre>
 *
 * <p>The heap is set by the caller ({@code java -Xmx1g -jar neo4j-launcher.jar ...}).
 *
 * <p>Behaviour: authentication is on, the HTTP and HTTPS connectors are off, Bolt is plain text
 * (no TLS) on {@code HOST:N}. On every start the password of {@code neo4j} is set to the content of
 * the password file with {@code CHANGE NOT REQUIRED}, through the embedded API (which is not subject
 * to authentication), so the file is the single source of truth. Then the launcher prints one line
 * {@code READY bolt://HOST:N} on stdout once the Bolt port accepts TCP connections, and runs until
 * SIGTERM/SIGINT, when a shutdown hook shuts the DBMS down cleanly. Exit status 2 means bad
 * arguments, 1 means the DBMS failed to start.
 *
 * <p>Note: on the very first start, Bolt listens for a moment (while the password is being set)
 * with Neo4j's initial credentials {@code neo4j/neo4j}, which only allow changing the password.
 * It listens on the loopback address only.
 */
public final class Neo4jLauncher {
    private static final Duration BOLT_WAIT = Duration.ofSeconds(60);

    private Neo4jLauncher() {}

    public static void main(String[] argv) {
        PrintStream out = System.out;
        Map<String, String> args;
        try {
            args = parseArgs(argv);
        } catch (IllegalArgumentException e) {
            System.err.println("neo4j-launcher: " + e.getMessage());
            System.err.println(
                    "usage: java -jar neo4j-launcher.jar --home DIR --bolt-port N --password-file FILE"
                            + " [--bolt-host HOST] [--pagecache SIZE]");
            System.exit(2);
            return;
        }
        Path home = Path.of(args.get("--home")).toAbsolutePath();
        String host = args.getOrDefault("--bolt-host", "127.0.0.1");
        int port = Integer.parseInt(args.get("--bolt-port"));
        Path passwordFile = Path.of(args.get("--password-file"));
        long pagecache = ByteUnit.parse(args.getOrDefault("--pagecache", "256m"));

        String password;
        try {
            password = Files.readString(passwordFile, StandardCharsets.UTF_8).strip();
        } catch (IOException e) {
            System.err.println("neo4j-launcher: cannot read the password file: " + e);
            System.exit(2);
            return;
        }
        if (password.isEmpty()) {
            System.err.println("neo4j-launcher: the password file is empty");
            System.exit(2);
            return;
        }

        long t0 = System.nanoTime();
        out.println("starting Neo4j (home " + home + ", bolt " + host + ":" + port + ")");
        out.flush();
        DatabaseManagementService dbms;
        try {
            Files.createDirectories(home);
            dbms = new DatabaseManagementServiceBuilder(home)
                    .setConfig(GraphDatabaseSettings.auth_enabled, true)
                    .setConfig(GraphDatabaseSettings.pagecache_memory, pagecache)
                    .setConfig(GraphDatabaseSettings.udc_enabled, false)
                    .setConfig(BoltConnector.enabled, true)
                    .setConfig(BoltConnector.listen_address, new SocketAddress(host, port))
                    .setConfig(BoltConnector.advertised_address, new SocketAddress(host, port))
                    .setConfig(BoltConnector.encryption_level, BoltConnector.EncryptionLevel.DISABLED)
                    // A dev stack: do not wait 5 s for idle Bolt connections on shutdown.
                    .setConfig(BoltConnectorInternalSettings.connection_shutdown_wait_time,
                            Duration.ofSeconds(1))
                    .setConfig(HttpConnector.enabled, false)
                    .setConfig(HttpsConnector.enabled, false)
                    .build();
        } catch (Throwable e) {
            System.err.println("neo4j-launcher: the DBMS failed to start");
            e.printStackTrace();
            System.exit(1);
            return;
        }

        CountDownLatch stopped = new CountDownLatch(1);
        AtomicBoolean shutDown = new AtomicBoolean(false);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            if (shutDown.compareAndSet(false, true)) {
                System.out.println("shutting down Neo4j");
                System.out.flush();
                try {
                    dbms.shutdown();
                } catch (Throwable e) {
                    e.printStackTrace();
                }
                System.out.println("Neo4j stopped");
                System.out.flush();
            }
            stopped.countDown();
        }, "neo4j-launcher-shutdown"));

        try {
            setPassword(dbms, password);
            waitForBolt(host, port);
        } catch (Throwable e) {
            System.err.println("neo4j-launcher: start failed");
            e.printStackTrace();
            System.exit(1); // runs the shutdown hook
            return;
        }
        long ms = (System.nanoTime() - t0) / 1_000_000;
        out.println("READY bolt://" + host + ":" + port + " (started in " + ms + " ms)");
        out.flush();

        try {
            stopped.await();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /** Sets the password of "neo4j" on the system database; idempotent. */
    private static void setPassword(DatabaseManagementService dbms, String password) {
        GraphDatabaseService system = dbms.database(GraphDatabaseSettings.SYSTEM_DATABASE_NAME);
        Map<String, Object> params = new HashMap<>();
        params.put("pw", password);
        try {
            system.executeTransactionally(
                    "ALTER USER neo4j SET PASSWORD $pw CHANGE NOT REQUIRED", params);
            System.out.println("password of neo4j set from the password file");
        } catch (RuntimeException e) {
            // Neo4j refuses to "change" a password to the one it already has; that is the
            // expected case on every start after the first one, and then nothing is to be done
            // except making sure no change is required.
            if (!isSamePasswordError(e)) {
                throw e;
            }
            system.executeTransactionally("ALTER USER neo4j SET PASSWORD CHANGE NOT REQUIRED");
            System.out.println("password of neo4j already equals the password file");
        }
    }

    private static boolean isSamePasswordError(Throwable e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            String m = t.getMessage();
            if (m != null && m.toLowerCase().contains("cannot be the same")) {
                return true;
            }
        }
        return false;
    }

    private static void waitForBolt(String host, int port) throws InterruptedException {
        long deadline = System.nanoTime() + BOLT_WAIT.toNanos();
        while (true) {
            try (Socket s = new Socket()) {
                s.connect(new InetSocketAddress(host, port), 1000);
                return;
            } catch (IOException e) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException(
                            "Bolt does not accept connections on " + host + ":" + port, e);
                }
                Thread.sleep(100);
            }
        }
    }

    private static Map<String, String> parseArgs(String[] argv) {
        Map<String, String> args = new HashMap<>();
        for (int i = 0; i < argv.length; i++) {
            String key = argv[i];
            String value;
            int eq = key.indexOf('=');
            if (key.startsWith("--") && eq > 0) {
                value = key.substring(eq + 1);
                key = key.substring(0, eq);
            } else if (i + 1 < argv.length) {
                value = argv[++i];
            } else {
                throw new IllegalArgumentException("missing value for " + key);
            }
            switch (key) {
                case "--home", "--bolt-port", "--password-file", "--bolt-host", "--pagecache" ->
                        args.put(key, value);
                default -> throw new IllegalArgumentException("unknown argument " + key);
            }
        }
        for (String required : new String[] {"--home", "--bolt-port", "--password-file"}) {
            if (!args.containsKey(required)) {
                throw new IllegalArgumentException("missing " + required);
            }
        }
        try {
            int port = Integer.parseInt(args.get("--bolt-port"));
            if (port < 1 || port > 65535) {
                throw new NumberFormatException();
            }
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("--bolt-port must be a port number");
        }
        return args;
    }
}
