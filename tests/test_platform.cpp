// The platform layer (platform/platform.h), on Linux and under Wine on the Windows build: UTF-8 paths with
// characters outside every ANSI code page, what a path is without opening it, the read-only mapping and its
// positioned reads, the case tables templates use, calendar dates, and starting a child process.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "platform/platform.h"

namespace vkspec::platform {
namespace {

std::string temp(const std::string& name) { return ::testing::TempDir() + "/" + name; }

// A folder named as a user's in Windows might be (C:\Users\Zoë\モデル\): created, written, typed, mapped and
// read back through UTF-8 strings only.
TEST(Platform, NonAsciiPathsAreFiles) {
  const std::string dir = temp("platform-Zo\xc3\xab-" + std::to_string(process_id())) + "/\xe3\x83\xa2\xe3\x83\x87\xe3\x83\xab";
  std::filesystem::create_directories(utf8_path(dir));
  const std::string file = dir + "/weights \xc3\xbc.bin";
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes += char(i * 7 + i / 256);
  {
    std::FILE* f = open_file(file, "wb");
    ASSERT_NE(f, nullptr) << last_error();
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    std::fclose(f);
  }
  EXPECT_EQ(file_info(dir).type, FileType::Directory);
  const FileInfo info = file_info(file);
  EXPECT_EQ(info.type, FileType::Regular);
  EXPECT_EQ(info.size, bytes.size());
  EXPECT_EQ(utf8_string(utf8_path(file)), file);   // no code page in between
  {
    MappedFile m(file);
    ASSERT_EQ(m.size(), bytes.size());
    EXPECT_EQ(std::string(reinterpret_cast<const char*>(m.data()), m.size()), bytes);
    std::string part(1000, '\0');
    m.read(54321, reinterpret_cast<uint8_t*>(part.data()), part.size());
    EXPECT_EQ(part, bytes.substr(54321, 1000));
    EXPECT_THROW(m.read(bytes.size() - 10, reinterpret_cast<uint8_t*>(part.data()), part.size()), std::runtime_error);
  }
  std::ifstream in(utf8_path(file), std::ios::binary);   // the standard library's streams take the same path
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bytes);
  in.close();
  std::filesystem::remove_all(utf8_path(temp("platform-Zo\xc3\xab-" + std::to_string(process_id()))));
}

TEST(Platform, WhatIsNotARegularFileIsNeverMapped) {
  const std::string dir = temp("platform-dir-" + std::to_string(process_id()));
  std::filesystem::create_directories(utf8_path(dir));
  try {
    MappedFile m(dir);
    FAIL() << "a directory was mapped";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
  }
  const std::string empty = dir + "/empty";
  std::fclose(open_file(empty, "wb"));
  EXPECT_EQ(file_info(empty).type, FileType::Regular);
  EXPECT_THROW(MappedFile m(empty), std::runtime_error);
  EXPECT_EQ(file_info(dir + "/missing").type, FileType::Missing);
  EXPECT_THROW(MappedFile m(dir + "/missing"), std::runtime_error);
  std::filesystem::remove_all(utf8_path(dir));
}

// Files written through a temporary name are created exclusively: whatever is at the name already (a file, a
// planted symbolic link to a file the writer may write) is neither followed nor truncated.
TEST(Platform, NewFilesNeverFollowOrTruncateWhatIsThere) {
  const std::string dir = temp("platform-new-" + std::to_string(process_id()));
  std::filesystem::create_directories(utf8_path(dir));
  const std::string victim = dir + "/victim.txt", existing = dir + "/existing.txt", link = dir + "/link.kv";
  for (const std::string& f : {victim, existing}) std::ofstream(utf8_path(f)) << "keep me";
  EXPECT_EQ(create_new_file(existing), nullptr);
  std::FILE* fresh = create_new_file(dir + "/fresh.txt");
  ASSERT_NE(fresh, nullptr);
  std::fputs("new", fresh);
  std::fclose(fresh);
  std::string tmp;
  std::FILE* t = create_temp_beside(dir + "/session.kv", &tmp);
  ASSERT_NE(t, nullptr) << last_error();
  std::fclose(t);
  EXPECT_EQ(tmp.rfind(dir + "/session.kv.tmp-", 0), 0u) << tmp;
  EXPECT_EQ(file_info(tmp).type, FileType::Regular);
  std::error_code ec;
  std::filesystem::create_symlink(utf8_path(victim), utf8_path(link), ec);
  if (!ec) {   // (Windows grants symbolic links to administrators and developer mode only)
    EXPECT_EQ(create_new_file(link), nullptr);
    std::ifstream v(utf8_path(victim));
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(v), {}), "keep me");
    v.close();
    std::filesystem::remove(utf8_path(victim));
    EXPECT_EQ(create_new_file(link), nullptr);   // a dangling link is not followed either
  }
  std::ifstream in(utf8_path(existing));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "keep me");
  in.close();
  std::filesystem::remove_all(utf8_path(dir));
}

// Python's str.upper()/lower() for the characters templates meet: accented Latin, Greek, Cyrillic, and a
// supplementary-plane letter (Deseret, a surrogate pair in UTF-16); no mapping leaves a code point as it is.
TEST(Platform, CaseTablesMapUnicodeLetters) {
  EXPECT_EQ(to_upper('a'), uint32_t('A'));
  EXPECT_EQ(to_lower('Q'), uint32_t('q'));
  EXPECT_EQ(to_upper(0xE9), 0xC9u);        // é -> É
  EXPECT_EQ(to_lower(0x3A3), 0x3C3u);      // Σ -> σ
  EXPECT_EQ(to_upper(0x436), 0x416u);      // ж -> Ж
  EXPECT_EQ(to_upper(0x10428), 0x10400u);  // 𐐨 -> 𐐀
  EXPECT_EQ(to_upper('7'), uint32_t('7'));
  EXPECT_EQ(to_upper(0x4E2D), 0x4E2Du);    // 中
  EXPECT_EQ(to_upper(0xDF), 0xDFu);        // ß: its upper case is two letters, not a simple mapping
}

TEST(Platform, CalendarDatesGetTheirWeekday) {
  std::tm tm{};
  tm.tm_year = 2024 - 1900, tm.tm_mon = 6, tm.tm_mday = 26, tm.tm_hour = 12;
  ASSERT_TRUE(complete_utc_date(tm));
  EXPECT_EQ(tm.tm_wday, 5);     // a Friday
  EXPECT_EQ(tm.tm_yday, 207);
  const std::tm epoch = utc_time(0);
  EXPECT_EQ(epoch.tm_year, 70);
  EXPECT_EQ(epoch.tm_wday, 4);  // 1970-01-01 was a Thursday
  EXPECT_GT(physical_memory_bytes(), uint64_t(64) << 20);
}

TEST(Platform, AChildThatCannotStartSaysSo) {
  const ChildOutput c = run_capturing_stdout({"vkspec-no-such-program-" + std::to_string(process_id())});
  EXPECT_EQ(c.out, "");
  EXPECT_EQ(c.failure.rfind("cannot start vkspec-no-such-program", 0), 0u) << c.failure;
  set_env("VKSPEC_PLATFORM_TEST", "on");
  EXPECT_STREQ(std::getenv("VKSPEC_PLATFORM_TEST"), "on");
  unset_env("VKSPEC_PLATFORM_TEST");
  EXPECT_EQ(std::getenv("VKSPEC_PLATFORM_TEST"), nullptr);
}

}  // namespace
}  // namespace vkspec::platform
