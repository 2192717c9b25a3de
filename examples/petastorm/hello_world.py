"""Petastorm's hello world (examples/hello_world/petastorm_dataset), rewritten small.

The dataset is written by Petastorm itself (``materialize_dataset`` on a local Spark); the two
readers are Petastorm's ``python_hello_world`` and ``pytorch_hello_world`` with one change, the
imports below (``from petastorm import make_reader`` and ``from petastorm.pytorch import
DataLoader`` in the original). tests/system/test_petastorm_spark.py runs this file with both
imports and compares the output.

    python examples/petastorm/hello_world.py /tmp/hello_world_dataset
"""

import sys

import numpy as np

from stoker.petastorm import make_reader
from stoker.petastorm.pytorch import DataLoader


def hello_world_schema():
    # Petastorm's HelloWorldSchema with smaller images (its is 128x256 and (None, 128, 30, None)).
    from petastorm.codecs import CompressedImageCodec, NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql.types import IntegerType

    return Unischema('HelloWorldSchema', [
        UnischemaField('id', np.int32, (), ScalarCodec(IntegerType()), False),
        UnischemaField('image1', np.uint8, (32, 64, 3), CompressedImageCodec('png'), False),
        UnischemaField('array_4d', np.uint8, (None, 16, 8, None), NdarrayCodec(), False),
    ])


def row_generator(x):
    """Returns a single entry in the generated dataset (random values, seeded by x)."""
    rng = np.random.default_rng(x)
    return {'id': x,
            'image1': rng.integers(0, 255, dtype=np.uint8, size=(32, 64, 3)),
            'array_4d': rng.integers(0, 255, dtype=np.uint8, size=(4, 16, 8, 3))}


def generate_petastorm_dataset(output_url='file:///tmp/hello_world_dataset', spark=None):
    from petastorm.etl.dataset_metadata import materialize_dataset
    from petastorm.unischema import dict_to_spark_row
    from pyspark.sql import SparkSession

    schema = hello_world_schema()
    rowgroup_size_mb = 256
    spark = spark or SparkSession.builder.config('spark.driver.memory', '2g') \
        .master('local[2]').getOrCreate()
    sc = spark.sparkContext
    rows_count = 10
    with materialize_dataset(spark, output_url, schema, rowgroup_size_mb):
        rows_rdd = sc.parallelize(range(rows_count)) \
            .map(row_generator) \
            .map(lambda x: dict_to_spark_row(schema, x))
        spark.createDataFrame(rows_rdd, schema.as_spark_schema()) \
            .coalesce(2) \
            .write \
            .mode('overwrite') \
            .parquet(output_url)


def python_hello_world(dataset_url='file:///tmp/hello_world_dataset'):
    rows = []
    with make_reader(dataset_url) as reader:
        # Pure python
        for schema_view in reader:
            print(schema_view.id)
            rows.append(schema_view)
    return rows


def pytorch_hello_world(dataset_url='file:///tmp/hello_world_dataset'):
    with DataLoader(make_reader(dataset_url)) as train_loader:
        sample = next(iter(train_loader))
        print(sample['id'])
    return sample


if __name__ == '__main__':
    url = 'file://' + sys.argv[1] if len(sys.argv) > 1 else 'file:///tmp/hello_world_dataset'
    python_hello_world(url)
    pytorch_hello_world(url)
