// Small RAII and error helpers over the HDF5 C API, so that checkpoint code reads as what it does.
// Every HDF5 failure becomes an fsdp::Error carrying HDF5's own innermost message; HDF5's
// automatic printing to stderr is silenced while libfsdp calls it (and restored after).
#pragma once

#include <hdf5.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.hpp"

namespace fsdp::ckpt {

// HDF5 is not thread-safe: every use of it by libfsdp holds this lock.
std::mutex& hdf5_mutex();

// Owns one HDF5 identifier and closes it with the right H5*close.
class Hid {
 public:
  Hid() = default;
  explicit Hid(hid_t id) : id_(id) {}
  ~Hid() { reset(); }
  Hid(Hid&& o) noexcept : id_(o.id_) { o.id_ = H5I_INVALID_HID; }
  Hid& operator=(Hid&& o) noexcept {
    if (this != &o) reset(), id_ = o.id_, o.id_ = H5I_INVALID_HID;
    return *this;
  }
  Hid(const Hid&) = delete;
  Hid& operator=(const Hid&) = delete;
  hid_t get() const { return id_; }
  operator hid_t() const { return id_; }
  bool valid() const { return id_ >= 0; }
  // Closes now and reports a failure (closing a file flushes it: an error there is real).
  void close(const std::string& what);
  // Gives the identifier up without closing it.
  void release() noexcept { id_ = H5I_INVALID_HID; }

 private:
  void reset() noexcept;
  hid_t id_ = H5I_INVALID_HID;
};

// Flushes and closes a file written to, reporting a failure (a full disk) as Errc::Io with the
// system's reason, without the HDF5 1.10 crash that a failed close leads to.
void close_file_checked(Hid& file, const std::string& what);

// Silences HDF5's automatic error printing for its lifetime.
class QuietHdf5 {
 public:
  QuietHdf5();
  ~QuietHdf5();
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// HDF5's innermost error message on this thread's stack ("" if none).
std::string hdf5_message();

// Throws `code` with "<what>: <HDF5's message>" when id < 0.
hid_t h5_check(hid_t id, Errc code, const std::string& what);
void h5_check_status(herr_t rc, Errc code, const std::string& what);

// A fixed-length string type of `chars` bytes, NUL-padded: what h5dump prints as text and h5py
// reads as bytes. Checkpoint strings never use variable-length types (those need a heap).
Hid fixed_string_type(std::size_t chars);

// Attributes (created on `obj`, read from it). Strings are fixed-length, ASCII/UTF-8, so h5dump
// prints them as text and h5py returns bytes/str.
void write_attr_string(hid_t obj, const char* name, const std::string& value);
void write_attr_i64(hid_t obj, const char* name, int64_t value);
void write_attr_u32(hid_t obj, const char* name, uint32_t value);
void write_attr_f64(hid_t obj, const char* name, double value);
bool has_attr(hid_t obj, const char* name);
std::string read_attr_string(hid_t obj, const char* name, const std::string& where);
int64_t read_attr_i64(hid_t obj, const char* name, const std::string& where);
double read_attr_f64(hid_t obj, const char* name, const std::string& where);
// Names of an object's attributes or a group's links, in name order.
std::vector<std::string> attr_names(hid_t obj);
std::vector<std::string> link_names(hid_t group);

}  // namespace fsdp::ckpt
