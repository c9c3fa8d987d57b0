// Writes small (possibly hostile) tar archives for the snapshot tests: entries of any type and name,
// gzip-compressed or not, so the extractor's refusals can be tested without `tar` making them safe.
#pragma once

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace commkit::testing {

class TarWriter {
 public:
  // type: '0' file, '5' directory, '2' symlink, '1' hard link, '6' FIFO, '3' char device.
  TarWriter& Add(const std::string& name, char type, const std::string& data = "", const std::string& link = "") {
    char h[512] = {};
    std::snprintf(h, 100, "%s", name.c_str());
    std::snprintf(h + 100, 8, "%07o", type == '5' ? 0755u : 0644u);
    std::snprintf(h + 108, 8, "%07o", 0u);
    std::snprintf(h + 116, 8, "%07o", 0u);
    std::snprintf(h + 124, 12, "%011llo", static_cast<unsigned long long>(type == '0' ? data.size() : 0));
    std::snprintf(h + 136, 12, "%011o", 0u);
    h[156] = type;
    std::snprintf(h + 157, 100, "%s", link.c_str());
    std::memcpy(h + 257, "ustar\0" "00", 8);
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned char c : h) sum += c;
    std::snprintf(h + 148, 8, "%06o", sum);
    out_.append(h, 512);
    if (type == '0') {
      out_ += data;
      out_.append((512 - data.size() % 512) % 512, '\0');
    }
    return *this;
  }
  // A regular-file header that claims `size` bytes, followed by `actual` zero bytes of data.
  TarWriter& AddClaimingSize(const std::string& name, unsigned long long size) {
    Add(name, '0');
    std::snprintf(&out_[out_.size() - 512 + 124], 12, "%011llo", size);
    char* h = &out_[out_.size() - 512];
    std::memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (int i = 0; i < 512; ++i) sum += static_cast<unsigned char>(h[i]);
    std::snprintf(h + 148, 8, "%06o", sum);
    return *this;
  }
  std::string Bytes() const { return out_ + std::string(1024, '\0'); }
  // Writes the archive gzip-compressed (the .tar.gz a snapshot is).
  void WriteGz(const std::filesystem::path& path, const std::string& extra_zeros = "") const {
    gzFile gz = gzopen(path.c_str(), "wb9");
    const std::string bytes = Bytes() + extra_zeros;
    gzwrite(gz, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(gz);
  }

 private:
  std::string out_;
};

}  // namespace commkit::testing
