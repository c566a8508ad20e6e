"""Put scikit-learn's bundled digits where the examples' --data reads them, as Parquet:

    .venv/bin/python examples/digits_parquet.py hdfs:///user/$USER/digits

(hdfs:// needs HADOOP_CONF_DIR and hdfs-native, `pip install 'tony-py[hdfs]'`; a local path works
too). It writes <dest>/train/part-0000{0..3}.parquet, the same 75 % the examples train on without
--data, and <dest>/test/part-00000.parquet, the other 25 %: x, the 8x8 pixels scaled to [0, 1] as
64 float32 (a fixed-size list), and y, the digit. Row groups of 64 rows let up to 21 tasks share
the training rows (tony_py.data splits by file, or by row group when files are fewer than tasks).
Files already there are replaced.
"""

import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tony_py.data import filesystem

TRAIN_FILES = 4
ROW_GROUP = 64


def table(x, y):
    pixels = pa.FixedSizeListArray.from_arrays(pa.array((x / 16.0).astype(np.float32).ravel()), 64)
    return pa.table({"x": pixels, "y": pa.array(y.astype(np.int64))})


def main(dest: str) -> None:
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)
    fs, _ = filesystem(dest)
    parts = {f"train/part-{i:05d}.parquet": table(xs, ys) for i, (xs, ys) in
             enumerate(zip(np.array_split(x_train, TRAIN_FILES), np.array_split(y_train, TRAIN_FILES)))}
    parts["test/part-00000.parquet"] = table(x_test, y_test)
    for name, rows in parts.items():
        url = f"{dest.rstrip('/')}/{name}"
        fs.makedirs(url.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(url, "wb") as f:
            pq.write_table(rows, f, row_group_size=ROW_GROUP)
        print(f"{url}: {rows.num_rows} rows", flush=True)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: {sys.argv[0]} DEST (an hdfs:// URL or a local directory)")
    main(sys.argv[1])
