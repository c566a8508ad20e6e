package io.tonypy.sidecar;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;

/**
 * Keeps a local copy of a log directory on any Hadoop file system (hdfs://, gs://, ...), so the
 * sidecar TensorBoard can serve it whatever file systems TensorBoard itself supports. Event
 * files only grow: each round copies the bytes a file gained since the last round.
 *
 * <p>Usage: LogDirMirror SOURCE_URI LOCAL_DIR INTERVAL_MS
 */
public final class LogDirMirror {
  private LogDirMirror() {}

  public static void main(String[] args) throws Exception {
    if (args.length != 3) {
      System.err.println("usage: LogDirMirror SOURCE_URI LOCAL_DIR INTERVAL_MS");
      System.exit(2);
    }
    Path source = new Path(args[0]);
    File target = new File(args[1]);
    long intervalMs = Long.parseLong(args[2]);
    FileSystem fs = source.getFileSystem(new Configuration());
    Path root = fs.makeQualified(source);
    while (true) {
      try {
        mirror(fs, root, target);
      } catch (IOException e) {
        System.err.println("log dir mirror: " + e); // the directory may not exist yet
      }
      Thread.sleep(intervalMs);
    }
  }

  static void mirror(FileSystem fs, Path root, File target) throws IOException {
    if (!fs.exists(root)) {
      return;
    }
    String prefix = root.toUri().getPath();
    RemoteIterator<LocatedFileStatus> files = fs.listFiles(root, true);
    while (files.hasNext()) {
      LocatedFileStatus st = files.next();
      String relative = st.getPath().toUri().getPath().substring(prefix.length()).replaceFirst("^/+", "");
      if (relative.isEmpty() || relative.contains("..")) {
        continue;
      }
      File local = new File(target, relative);
      long have = local.exists() ? local.length() : 0;
      if (st.getLen() <= have) {
        continue;
      }
      local.getParentFile().mkdirs();
      try (FSDataInputStream in = fs.open(st.getPath());
          OutputStream out = new FileOutputStream(local, true)) {
        in.seek(have);
        copy(in, out);
      }
    }
  }

  private static void copy(InputStream in, OutputStream out) throws IOException {
    byte[] buffer = new byte[64 * 1024];
    int n;
    while ((n = in.read(buffer)) > 0) {
      out.write(buffer, 0, n);
    }
  }
}
