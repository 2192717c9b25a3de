// A test base file for the io/ tests: an in-memory file whose every call goes to an Arrow
// BufferReader. Tests override ReadAt to count, gate or record reads, then call this one.
#pragma once

#include <arrow/buffer.h>
#include <arrow/io/interfaces.h>
#include <arrow/io/memory.h>

#include <memory>

namespace stoker::test_file {

class BufferFile : public arrow::io::RandomAccessFile {
 public:
  explicit BufferFile(std::shared_ptr<arrow::Buffer> data)
      : reader_(std::make_shared<arrow::io::BufferReader>(std::move(data))) {}
  arrow::Status Close() override { return reader_->Close(); }
  bool closed() const override { return reader_->closed(); }
  arrow::Result<int64_t> Tell() const override { return reader_->Tell(); }
  arrow::Status Seek(int64_t position) override { return reader_->Seek(position); }
  arrow::Result<int64_t> GetSize() override { return reader_->GetSize(); }
  arrow::Result<int64_t> Read(int64_t nbytes, void* out) override {
    return reader_->Read(nbytes, out);
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> Read(int64_t nbytes) override {
    return reader_->Read(nbytes);
  }
  arrow::Result<std::shared_ptr<arrow::Buffer>> ReadAt(int64_t position, int64_t nbytes) override {
    return reader_->ReadAt(position, nbytes);
  }

 private:
  std::shared_ptr<arrow::io::BufferReader> reader_;
};

}  // namespace stoker::test_file
