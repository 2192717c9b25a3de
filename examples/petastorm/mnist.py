"""Petastorm's MNIST PyTorch example (examples/mnist), rewritten small.

``MnistSchema`` and the training loop are Petastorm's; the images are synthetic 28x28 digits so
that nothing is downloaded, and the normalisation Petastorm's example does in a TransformSpec
(torchvision's ToTensor + Normalize) is done in the loop. The one change for stoker is the import
below (``from petastorm import make_reader`` / ``from petastorm.pytorch import DataLoader``).
tests/system/test_petastorm_spark.py runs it with both imports.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from stoker.petastorm import make_reader
from stoker.petastorm.pytorch import DataLoader


def mnist_schema():
    from petastorm.codecs import NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql.types import IntegerType

    return Unischema('MnistSchema', [
        UnischemaField('idx', np.int_, (), ScalarCodec(IntegerType()), False),
        UnischemaField('digit', np.int_, (), ScalarCodec(IntegerType()), False),
        UnischemaField('image', np.uint8, (28, 28), NdarrayCodec(), False),
    ])


def synthetic_digits(count, seed):
    """Rows of MnistSchema: a bright bar whose position is the digit, plus noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for idx in range(count):
        digit = int(rng.integers(0, 10))
        image = rng.integers(0, 60, (28, 28)).astype(np.uint8)
        image[2 + 2 * digit:4 + 2 * digit, 4:24] = 255
        rows.append({'idx': idx, 'digit': digit, 'image': image})
    return rows


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(28 * 28, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.view(-1, 28 * 28)))
        return F.log_softmax(self.fc2(x), dim=1)


def _normalise(image):
    return (image.float() / 255.0 - 0.1307) / 0.3081


def train(model, device, train_loader, optimizer):
    model.train()
    for row in train_loader:
        data, target = _normalise(row['image']).to(device), row['digit'].to(device)
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()


def evaluate(model, device, test_loader):
    model.eval()
    test_loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for row in test_loader:
            data, target = _normalise(row['image']).to(device), row['digit'].to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            correct += output.argmax(dim=1).eq(target).sum().item()
            count += data.shape[0]
    return test_loss / count, correct, count


def main(dataset_url, epochs=2, batch_size=16, seed=0):
    torch.manual_seed(seed)
    device = torch.device('cpu')
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    with DataLoader(make_reader('{}/train'.format(dataset_url), num_epochs=epochs, seed=seed,
                                shuffle_rows=True), batch_size=batch_size) as train_loader:
        train(model, device, train_loader, optimizer)
    with DataLoader(make_reader('{}/test'.format(dataset_url), num_epochs=1),
                    batch_size=batch_size) as test_loader:
        test_loss, correct, count = evaluate(model, device, test_loader)
    return test_loss, correct, count
