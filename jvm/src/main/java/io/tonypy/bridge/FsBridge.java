package io.tonypy.bridge;

import java.io.IOException;
import java.util.LinkedHashMap;
import java.util.Map;
import java.nio.charset.StandardCharsets;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.permission.FsAction;
import org.apache.hadoop.fs.permission.FsPermission;

/**
 * The Hadoop FileSystem as Python sees it: paths in, JSON or primitives out. Staging goes
 * through here so LocalResource sizes and timestamps come from the same file system YARN
 * localizes from (HDFS here, gs:// on Dataproc).
 */
public final class FsBridge {
  private static final FsPermission PRIVATE = new FsPermission((short) 0600);
  private static final int BUFFER = 64 * 1024;
  private final Configuration conf;

  public FsBridge(Configuration conf) {
    this.conf = conf;
  }

  private FileSystem fs(Path p) throws IOException {
    return p.getFileSystem(conf);
  }

  public String homeDirectory() throws IOException {
    return FileSystem.get(conf).getHomeDirectory().toString();
  }

  public boolean exists(String path) throws IOException {
    Path p = new Path(path);
    return fs(p).exists(p);
  }

  public void mkdirs(String path, int mode) throws IOException {
    Path p = new Path(path);
    FileSystem fs = fs(p);
    fs.mkdirs(p);
    // mkdirs applies the umask; set the mode explicitly.
    fs.setPermission(p, new FsPermission((short) mode));
  }

  public void setPermission(String path, int mode) throws IOException {
    Path p = new Path(path);
    fs(p).setPermission(p, new FsPermission((short) mode));
  }

  /**
   * Copies a local file up, created with its final mode; returns the resource description of
   * the uploaded file.
   */
  public String upload(String localPath, String remotePath, int mode) throws IOException {
    Path dst = new Path(remotePath);
    FileSystem fs = fs(dst);
    // Write to a temporary name and rename, so a concurrent reader (another submit that
    // shares the content-addressed cache) never sees a half-written file.
    Path tmp = new Path(dst.getParent(), "." + dst.getName() + "." + System.nanoTime() + ".tmp");
    try {
      try (java.io.InputStream in = java.nio.file.Files.newInputStream(java.nio.file.Paths.get(localPath));
          FSDataOutputStream out = fs.create(tmp, new FsPermission((short) mode), true, BUFFER,
              fs.getDefaultReplication(tmp), fs.getDefaultBlockSize(tmp), null)) {
        Streams.copy(in, out);
      }
      if (!fs.rename(tmp, dst) && !fs.exists(dst)) {
        throw new IOException("could not rename " + tmp + " to " + dst);
      }
    } finally {
      fs.delete(tmp, false); // a no-op after a successful rename; no half upload stays behind
    }
    return describe(remotePath);
  }

  /** {"path", "size", "mtime", "mode", "public"} of a file, or null if it does not exist. */
  public String describe(String path) throws IOException {
    Path p = new Path(path);
    FileSystem fs = fs(p);
    FileStatus st;
    try {
      st = fs.getFileStatus(p);
    } catch (java.io.FileNotFoundException e) {
      return null;
    }
    Map<String, Object> out = new LinkedHashMap<>();
    out.put("path", fs.makeQualified(st.getPath()).toString());
    out.put("size", st.getLen());
    out.put("mtime", st.getModificationTime());
    out.put("mode", (int) st.getPermission().toShort());
    out.put("directory", st.isDirectory());
    out.put("public", isPublic(fs, st));
    return Json.write(out);
  }

  /**
   * Whether a NodeManager would accept the file as a PUBLIC resource: readable by all, and
   * every ancestor directory traversable by all (the same test the NodeManager applies).
   */
  private static boolean isPublic(FileSystem fs, FileStatus st) throws IOException {
    if (!st.getPermission().getOtherAction().implies(FsAction.READ)) {
      return false;
    }
    Path dir = st.getPath().getParent();
    while (dir != null) {
      FileStatus ds = fs.getFileStatus(dir);
      if (!ds.getPermission().getOtherAction().implies(FsAction.EXECUTE)) {
        return false;
      }
      dir = dir.getParent();
    }
    return true;
  }

  /** Paths of the plain files directly inside a directory (empty if it does not exist). */
  public String[] listFiles(String dir) throws IOException {
    return list(dir, FileStatus::isFile);
  }

  private String[] list(String dir, java.util.function.Predicate<FileStatus> keep) throws IOException {
    Path p = new Path(dir);
    FileSystem fs = fs(p);
    if (!fs.exists(p)) {
      return new String[0];
    }
    java.util.List<String> out = new java.util.ArrayList<>();
    for (FileStatus st : fs.listStatus(p)) {
      if (keep.test(st)) {
        out.add(fs.makeQualified(st.getPath()).toString());
      }
    }
    return out.toArray(new String[0]);
  }

  /** A new file (parent dirs made, mode 0600) that grows by flushed batches: see AppendLog. */
  public AppendLog openAppendLog(String path) throws IOException {
    Path p = new Path(path);
    FileSystem fs = fs(p);
    fs.mkdirs(p.getParent(), new FsPermission((short) 0700));
    return new AppendLog(
        fs.create(p, PRIVATE, true, BUFFER, fs.getDefaultReplication(p), fs.getDefaultBlockSize(p), null));
  }

  /** Moves a file or directory, making the target's parent dirs first. */
  public boolean rename(String from, String to) throws IOException {
    Path src = new Path(from);
    Path dst = new Path(to);
    FileSystem fs = fs(src);
    fs.mkdirs(dst.getParent(), new FsPermission((short) 0700));
    return fs.rename(src, dst);
  }

  /** Copies a file to this machine (bulk bytes never cross Py4J: Python reads the local copy). */
  public void download(String remote, String local) throws IOException {
    Path src = new Path(remote);
    fs(src).copyToLocalFile(false, src, new Path(local), true);
  }

  /** Paths of the files named `name` anywhere under root (empty if root does not exist). */
  public String[] findFiles(String root, String name) throws IOException {
    Path p = new Path(root);
    FileSystem fs = fs(p);
    java.util.List<String> out = new java.util.ArrayList<>();
    if (!fs.exists(p)) {
      return new String[0];
    }
    org.apache.hadoop.fs.RemoteIterator<org.apache.hadoop.fs.LocatedFileStatus> it = fs.listFiles(p, true);
    while (it.hasNext()) {
      org.apache.hadoop.fs.LocatedFileStatus st = it.next();
      if (st.getPath().getName().equals(name)) {
        out.add(fs.makeQualified(st.getPath()).toString());
      }
    }
    return out.toArray(new String[0]);
  }

  /** Paths of the directories directly inside dir (empty if it does not exist). */
  public String[] listDirs(String dir) throws IOException {
    return list(dir, FileStatus::isDirectory);
  }

  public boolean delete(String path, boolean recursive) throws IOException {
    Path p = new Path(path);
    return fs(p).delete(p, recursive);
  }

  public String readText(String path) throws IOException {
    Path p = new Path(path);
    try (java.io.InputStream in = fs(p).open(p)) {
      return new String(Streams.readAll(in), StandardCharsets.UTF_8);
    }
  }

  /**
   * Replaces a file's content atomically: written under a temporary name, then renamed over the
   * old one. A writer that dies half-way (an AM attempt killed mid-write) leaves the previous
   * version readable, not an empty file with an open lease. The parent directory is never
   * created: a staging dir the client removed after killing the application stays removed,
   * even if its dying AM writes one last snapshot.
   */
  public void writeTextAtomic(String path, String text) throws IOException {
    Path dst = new Path(path);
    FileSystem fs = fs(dst);
    Path tmp = new Path(dst.getParent(), "." + dst.getName() + "." + System.nanoTime() + ".tmp");
    try {
      try (FSDataOutputStream out = fs.createNonRecursive(
          tmp, PRIVATE, true, BUFFER, fs.getDefaultReplication(tmp), fs.getDefaultBlockSize(tmp), null)) {
        out.write(text.getBytes(StandardCharsets.UTF_8));
      }
      org.apache.hadoop.fs.FileContext.getFileContext(fs.getUri(), conf)
          .rename(tmp, dst, org.apache.hadoop.fs.Options.Rename.OVERWRITE);
    } finally {
      fs.delete(tmp, false);
    }
  }

  /**
   * Writes a file created with its final mode (the umask can only narrow it), so its content
   * is never readable with a wider one, not even for a moment: the app secret is written here.
   */
  public void writeText(String path, String text, int mode) throws IOException {
    Path p = new Path(path);
    FileSystem fs = fs(p);
    try (FSDataOutputStream out = fs.create(
        p, new FsPermission((short) mode), true, BUFFER, fs.getDefaultReplication(p), fs.getDefaultBlockSize(p), null)) {
      out.write(text.getBytes(StandardCharsets.UTF_8));
    }
  }
}
