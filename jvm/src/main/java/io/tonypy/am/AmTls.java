package io.tonypy.am;

import io.tonypy.bridge.Streams;
import java.io.File;
import java.io.FileInputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.KeyStore;
import java.security.MessageDigest;
import java.security.PrivateKey;
import java.security.SecureRandom;
import java.security.cert.Certificate;
import java.util.Base64;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * Key material for the AM's TLS listener, made by the JDK's own keytool (no library makes
 * certificates with public JDK API alone): an EC key and a self-signed certificate per AM
 * attempt, never stored anywhere but the container's working dir (key 0600). Executors do not
 * trust it by a CA: they pin its SHA-256, which reaches them in an answer signed with the
 * application's secret.
 */
final class AmTls {
  private AmTls() {}

  static Map<String, String> generate(File dir) throws Exception {
    File store = new File(dir, "am-tls.p12");
    char[] password = randomPassword();
    Files.deleteIfExists(store.toPath());
    String keytool = System.getProperty("java.home") + "/bin/keytool";
    ProcessBuilder p =
        new ProcessBuilder(
                keytool, "-genkeypair", "-alias", "am", "-keyalg", "EC", "-groupname", "secp256r1",
                "-dname", "CN=tony-py-am", "-validity", "3650", "-storetype", "PKCS12",
                "-keystore", store.getPath(), "-storepass:env", "TONY_TLS_PASS")
            .redirectErrorStream(true);
    p.environment().put("TONY_TLS_PASS", new String(password));
    Process run = p.start();
    String output = new String(Streams.readAll(run.getInputStream()), StandardCharsets.UTF_8);
    if (!run.waitFor(60, TimeUnit.SECONDS) || run.exitValue() != 0) {
      throw new IOException("keytool could not make the AM's TLS key: " + output.trim());
    }
    KeyStore ks = KeyStore.getInstance("PKCS12");
    try (FileInputStream in = new FileInputStream(store)) {
      ks.load(in, password);
    }
    PrivateKey key = (PrivateKey) ks.getKey("am", password);
    Certificate cert = ks.getCertificate("am");
    Files.delete(store.toPath());
    File keyFile = new File(dir, "am-tls.key");
    File certFile = new File(dir, "am-tls.crt");
    Files.deleteIfExists(keyFile.toPath());
    Files.createFile(keyFile.toPath(), PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rw-------")));
    Files.write(keyFile.toPath(), pem("PRIVATE KEY", key.getEncoded()).getBytes(StandardCharsets.US_ASCII));
    Files.write(certFile.toPath(), pem("CERTIFICATE", cert.getEncoded()).getBytes(StandardCharsets.US_ASCII));
    Map<String, String> out = new LinkedHashMap<>();
    out.put("cert", certFile.getAbsolutePath());
    out.put("key", keyFile.getAbsolutePath());
    StringBuilder hex = new StringBuilder();
    for (byte b : MessageDigest.getInstance("SHA-256").digest(cert.getEncoded())) {
      hex.append(String.format("%02x", b));
    }
    out.put("sha256", hex.toString());
    return out;
  }

  private static String pem(String kind, byte[] der) {
    String body = Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII)).encodeToString(der);
    return "-----BEGIN " + kind + "-----\n" + body + "\n-----END " + kind + "-----\n";
  }

  private static char[] randomPassword() {
    byte[] raw = new byte[24];
    new SecureRandom().nextBytes(raw);
    return Base64.getUrlEncoder().withoutPadding().encodeToString(raw).toCharArray();
  }
}
