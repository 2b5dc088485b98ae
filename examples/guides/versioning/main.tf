terraform {
  required_version = ">= 1.11"

  required_providers {
    kohaku = {
      source = "kohaku/kohaku"
      # 0.1.x patches only: while the version is 0.x, a minor release may
      # break. From 1.0 on, "~> 1.2" takes every 1.x from 1.2.
      version = "~> 0.1.0"
    }
  }
}
