package io.tonypy.bridge;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.fs.FSDataOutputStream;

/**
 * A file on the cluster file system that grows by whole batches of lines, each made visible to
 * readers at once (hflush): the AM's job history while it runs. If the AM dies, what was
 * flushed stays readable.
 */
public final class AppendLog {
  private final FSDataOutputStream out;

  AppendLog(FSDataOutputStream out) {
    this.out = out;
  }

  public synchronized void write(String text) throws IOException {
    out.write(text.getBytes(StandardCharsets.UTF_8));
    out.hflush();
  }

  public synchronized void close() throws IOException {
    out.close();
  }
}
