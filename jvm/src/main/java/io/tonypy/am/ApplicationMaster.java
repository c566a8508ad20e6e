package io.tonypy.am;

import java.net.InetAddress;
import java.security.SecureRandom;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import py4j.GatewayServer;

/**
 * The AM container's main: opens a Py4J gateway on loopback, protected by a fresh token, and
 * starts the Python AM (python -m tony_py.am) with the port and token in its environment.
 * The JVM keeps the RM heartbeat alive whatever Python is doing, and turns Python's outcome
 * into the attempt's exit code: an attempt that did not unregister exits non-zero, so YARN
 * starts the next attempt.
 */
public final class ApplicationMaster {
  private ApplicationMaster() {}

  static void log(String msg) {
    System.err.println(Instant.now() + " [tony-am-jvm] " + msg);
  }

  public static void main(String[] args) throws Exception {
    // The JDK reads no KRB5_CONFIG (MIT's variable, which a NodeManager may pass on): honour it,
    // as the client's JVM does (tony_py/bridge/jvm.py), before the keytab login in AmBridge.
    String krb5 = System.getenv("KRB5_CONFIG");
    if (krb5 != null && !krb5.isEmpty() && System.getProperty("java.security.krb5.conf") == null) {
      System.setProperty("java.security.krb5.conf", krb5);
    }
    AmBridge bridge = new AmBridge();
    byte[] raw = new byte[32];
    new SecureRandom().nextBytes(raw);
    StringBuilder token = new StringBuilder();
    for (byte b : raw) {
      token.append(String.format("%02x", b));
    }
    GatewayServer gateway =
        new GatewayServer.GatewayServerBuilder(bridge)
            .javaAddress(InetAddress.getLoopbackAddress())
            .javaPort(0)
            .authToken(token.toString())
            .build();
    gateway.start();
    log("gateway on 127.0.0.1:" + gateway.getListeningPort() + " for " + bridge.applicationId()
        + " attempt " + bridge.attemptNumber());

    List<String> cmd = new ArrayList<>();
    String python = System.getenv().getOrDefault("TONY_AM_PYTHON", "python3");
    cmd.add(python);
    cmd.add("-m");
    cmd.add("tony_py.am");
    for (String a : args) {
      cmd.add(a);
    }
    ProcessBuilder pb = new ProcessBuilder(cmd).inheritIO();
    Map<String, String> env = pb.environment();
    env.put("TONY_GATEWAY_PORT", Integer.toString(gateway.getListeningPort()));
    env.put("TONY_GATEWAY_SECRET", token.toString());
    Process python_am = pb.start();

    Thread hook =
        new Thread(
            () -> {
              // The NM stops the AM with SIGTERM (kill, preemption): pass it on and give
              // Python a moment to stop its tasks.
              if (python_am.isAlive()) {
                python_am.destroy();
                try {
                  python_am.waitFor(5, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                  Thread.currentThread().interrupt();
                }
                python_am.destroyForcibly();
              }
            });
    Runtime.getRuntime().addShutdownHook(hook);

    int rc = python_am.waitFor();
    boolean unregistered = bridge.isUnregistered();
    log("python AM exited with " + rc + (unregistered ? " after unregistering" : " without unregistering"));
    bridge.shutdown();
    gateway.shutdown();
    Runtime.getRuntime().removeShutdownHook(hook);
    if (unregistered) {
      System.exit(0);
    }
    System.exit(rc == 0 ? 1 : rc);
  }
}
