package io.tonypy.am;

import java.net.InetAddress;
import java.security.SecureRandom;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import py4j.GatewayServer;

/**
 * The AM container's main: opens a Py4J gateway on loopback, protected by a fresh token, and
 * starts the Python AM (python -m tony_py.am) with the token in its environment and the port
 * on its stdin.
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
    byte[] raw = new byte[32];
    new SecureRandom().nextBytes(raw);
    StringBuilder token = new StringBuilder();
    for (byte b : raw) {
      token.append(String.format("%02x", b));
    }
    // Python starts first, so its imports (~0.1 s) overlap this JVM's own start; it reads the
    // gateway's port from its stdin (the token is in its environment, never on a command line).
    List<String> cmd = new ArrayList<>();
    String python = System.getenv().getOrDefault("TONY_AM_PYTHON", "python3");
    cmd.add(python);
    cmd.add("-m");
    cmd.add("tony_py.am");
    for (String a : args) {
      cmd.add(a);
    }
    ProcessBuilder pb = new ProcessBuilder(cmd)
        .redirectOutput(ProcessBuilder.Redirect.INHERIT)
        .redirectError(ProcessBuilder.Redirect.INHERIT);
    pb.environment().put("TONY_GATEWAY_SECRET", token.toString());
    Process python_am = pb.start();

    AmBridge bridge;
    GatewayServer gateway;
    try {
      bridge = new AmBridge();
      gateway =
          new GatewayServer.GatewayServerBuilder(bridge)
              .javaAddress(InetAddress.getLoopbackAddress())
              .javaPort(0)
              .authToken(token.toString())
              .build();
      gateway.start();
    } catch (Throwable t) {
      python_am.destroyForcibly(); // its stdin closes unread: it would stop anyway
      throw t;
    }
    log("gateway on 127.0.0.1:" + gateway.getListeningPort() + " for " + bridge.applicationId()
        + " attempt " + bridge.attemptNumber());
    try (java.io.Writer port = new java.io.OutputStreamWriter(
        python_am.getOutputStream(), java.nio.charset.StandardCharsets.US_ASCII)) {
      port.write(gateway.getListeningPort() + "\n");
    } catch (java.io.IOException e) {
      log("python AM gone before it was told the gateway's port: " + e);
    }

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
