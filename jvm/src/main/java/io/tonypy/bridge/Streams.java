package io.tonypy.bridge;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;

/**
 * InputStream.readAllBytes and transferTo for Java 8: the jar is built with --release 8, so a
 * NodeManager on Java 8 can run the AM (pom.xml).
 */
public final class Streams {
  private static final int BUFFER = 64 * 1024;

  private Streams() {}

  public static long copy(InputStream in, OutputStream out) throws IOException {
    byte[] buffer = new byte[BUFFER];
    long total = 0;
    for (int n; (n = in.read(buffer)) >= 0; ) {
      out.write(buffer, 0, n);
      total += n;
    }
    return total;
  }

  public static byte[] readAll(InputStream in) throws IOException {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    copy(in, out);
    return out.toByteArray();
  }
}
